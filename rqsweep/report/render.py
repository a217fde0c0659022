"""A report as a list of blocks, rendered to Markdown and to one self-contained HTML page.

Tables are polars frames holding raw values; cells are formatted here, once, for both outputs:
floats to 4 decimals (the precision SOAT's gate compares at), differences (a column named with
the word "Δ") with a sign, nulls as "–".
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field

import polars as pl

_NUMBER = re.compile(r"[-+]?[\d,]*\.?\d+(e[-+]?\d+)?|–")


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Table:
    frame: pl.DataFrame
    highlight: frozenset[int] = field(default_factory=frozenset)  # row indices shown in bold
    note: str = ""


@dataclass(frozen=True)
class Figure:
    title: str
    png: bytes


Block = Heading | Paragraph | Table | Figure


def format_cell(column: str, value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:+.4f}" if "Δ" in column.split() else f"{value:.4f}"
    return str(value)


def _cells(frame: pl.DataFrame) -> list[list[str]]:
    return [[format_cell(c, v) for c, v in zip(frame.columns, row)] for row in frame.iter_rows()]


def _numeric(cells: list[list[str]], width: int) -> list[bool]:
    """Per column: does every cell read as a number? Those align right, so their digits line up."""
    return [bool(cells) and all(_NUMBER.fullmatch(row[j]) for row in cells) for j in range(width)]


def markdown_table(frame: pl.DataFrame, highlight: frozenset[int] = frozenset()) -> str:
    """A Markdown table padded to aligned columns, so that it also reads as plain text in a terminal."""
    cells = _cells(frame)
    right = _numeric(cells, frame.width)
    rows = [[f"**{c}**" if i in highlight else c for c in row] for i, row in enumerate(cells)]
    widths = [max(len(h), *(len(r[j]) for r in rows)) if rows else len(h) for j, h in enumerate(frame.columns)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)) + " |"

    rule = "| " + " | ".join("-" * (w - 1) + ":" if r else "-" * w for w, r in zip(widths, right)) + " |"
    return "\n".join([line(frame.columns), rule, *map(line, rows)])


def to_markdown(blocks: list[Block]) -> str:
    out = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {b.text}")
        elif isinstance(b, Paragraph):
            out.append(b.text)
        elif isinstance(b, Table):
            out.append(markdown_table(b.frame, b.highlight) + (f"\n\n*{b.note}*" if b.note else ""))
        else:
            out.append(f"*Plot: {b.title} (embedded in report.html).*")
    return "\n\n".join(out) + "\n"


_CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2433; margin: 2em auto;
       max-width: 1120px; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #d7dce5; }
h3 { margin-top: 1.4em; }
table { border-collapse: collapse; margin: .6em 0; font-size: 14px; font-variant-numeric: tabular-nums; }
div.table { overflow-x: auto; }
th, td { padding: .25em .5em; border-bottom: 1px solid #e3e7ee; text-align: left; }
td { overflow-wrap: anywhere; } td.num { white-space: nowrap; }  /* text wraps so no table outgrows the page */
th { background: #f3f5f9; font-weight: 600; white-space: normal; vertical-align: bottom; }
.num { text-align: right; } th.group { text-align: center; border-bottom: 2px solid #c9d0dc; }
tr.chosen td { font-weight: 700; background: #fff7dc; }
p.note { color: #566074; font-size: .9em; margin-top: .2em; max-width: 60em; }
figure { margin: 1em 0; } figure img { max-width: 100%; } figcaption { color: #566074; font-size: .9em; }
"""


def _header_text(text: str) -> str:
    # Knob names are long words joined by "_": let a header break after one rather than widen its column.
    return html.escape(text).replace("_", "_<wbr>")


def _html_head(columns: list[str], align: list[str]) -> str:
    """Header rows. Adjacent columns sharing a first word ("entity MRR", "entity recall@10") get it once,
    spanning them, over their second words: wide tables stay narrow enough to read without scrolling."""
    groups: list[tuple[str, list[int]]] = []
    for j, c in enumerate(columns):
        first = c.split(" ", 1)[0] if " " in c else ""
        if groups and first and groups[-1][0] == first:
            groups[-1][1].append(j)
        else:
            groups.append((first, [j]))
    if all(len(js) == 1 for _, js in groups):
        return "<tr>" + "".join(f"<th{a}>{_header_text(c)}</th>" for a, c in zip(align, columns)) + "</tr>"
    top, below = [], []
    for first, js in groups:
        if len(js) == 1:
            top.append(f'<th rowspan="2"{align[js[0]]}>{_header_text(columns[js[0]])}</th>')
        else:
            top.append(f'<th colspan="{len(js)}" class="group">{_header_text(first)}</th>')
            below += [f"<th{align[j]}>{_header_text(columns[j].split(' ', 1)[1])}</th>" for j in js]
    return f"<tr>{''.join(top)}</tr><tr>{''.join(below)}</tr>"


def _html_table(b: Table) -> str:
    cells = _cells(b.frame)
    align = [' class="num"' if r else "" for r in _numeric(cells, b.frame.width)]
    head = _html_head(b.frame.columns, align)
    chosen = ' class="chosen"'
    body = "".join(
        f"<tr{chosen if i in b.highlight else ''}>"
        + "".join(f"<td{a}>{html.escape(c)}</td>" for a, c in zip(align, row)) + "</tr>"
        for i, row in enumerate(cells))
    note = f'<p class="note">{html.escape(b.note)}</p>' if b.note else ""
    return f'<div class="table"><table><thead>{head}</thead><tbody>{body}</tbody></table></div>{note}'


def _html_block(b: Block) -> str:
    if isinstance(b, Heading):
        return f"<h{b.level}>{html.escape(b.text)}</h{b.level}>"
    if isinstance(b, Paragraph):
        return f"<p>{html.escape(b.text)}</p>"
    if isinstance(b, Table):
        return _html_table(b)
    data = base64.b64encode(b.png).decode("ascii")
    title = html.escape(b.title)
    return f'<figure><img src="data:image/png;base64,{data}" alt="{title}"><figcaption>{title}</figcaption></figure>'


def to_html(blocks: list[Block], title: str) -> str:
    """One page with inline CSS and images as data: URIs: it opens with no network and no other file."""
    body = "\n".join(_html_block(b) for b in blocks)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n")
