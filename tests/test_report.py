"""The report's content checked against a grid built by hand: tables, chosen setting, significance, costs."""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from rqsweep.errors import InputError
from rqsweep.files import write_parquet
from rqsweep.knobs import KNOBS
from rqsweep.report import plots, write_report
from rqsweep.report.recency import ranks_lost, recency_cost
from rqsweep.decide.significance import holm, paired_differences, paired_test, significance_table
from rqsweep.report.tables import best_vs_baseline, infeasible_groups, knob_table
from rqsweep.runfolder import read_run_folder
from tests.runfolders import CONFIG, query_rows, write_run

BASE, BEST = "k60_moff_h0.0", "k5_moff_h30.0"

# Two slices, entity (40 queries) and freshness (10), over rrf_k {5, 60} x floor {off, 0.2} x half-life {0, 30}.
# Constraints (tests.runfolders.CONFIG): recall@10 >= 0.5 and MRR within 0.1 of the baseline, per slice.
SETTINGS = {
    BASE:             {"entity": (1, 1, .5), "freshness": (.7, .7, .45), "overall": (.94, .94, .49)},
    "k5_moff_h0.0":   {"entity": (1, 1, .6), "freshness": (.7, .7, .4), "overall": (.94, .94, .56)},
    "k60_moff_h30.0": {"entity": (1, 1, .5), "freshness": (.8, .8, .6), "overall": (.96, .96, .52)},
    BEST:             {"entity": (1, 1, .75), "freshness": (.7, .7, .525), "overall": (.94, .94, .705)},
    "k60_m0.2_h0.0":  {"entity": (.3, .3, .2), "freshness": (.7, .7, .45), "overall": (.38, .38, .25)},
    "k5_m0.2_h0.0":   {"entity": (.4, .4, .3), "freshness": (.7, .7, .45), "overall": (.46, .46, .33)},
    "k60_m0.2_h30.0": {"entity": (1, 1, .5), "freshness": (.3, .3, .2), "overall": (.86, .86, .44)},
    # The highest overall MRR, but freshness MRR falls 0.15: infeasible, so not the best.
    "k5_m0.2_h30.0":  {"entity": (1, 1, .9), "freshness": (.6, .6, .3), "overall": (.92, .92, .78)},
}
# The constraint keys each setting breaks, as the run found them (CONFIG's constraints on SETTINGS' values).
INFEASIBLE = {
    "k60_m0.2_h0.0": ["recall_at_10[entity]:min", "mrr[entity]:max_drop"],
    "k5_m0.2_h0.0": ["recall_at_10[entity]:min", "mrr[entity]:max_drop"],
    "k60_m0.2_h30.0": ["recall_at_10[freshness]:min", "mrr[freshness]:max_drop"],
    "k5_m0.2_h30.0": ["mrr[freshness]:max_drop"],
}

# Ranks behind the best and baseline rows above. Entity: every query gains (rank 2 -> 1 on half of them), a
# clear win. Freshness: two queries gain, two lose; MRR 0.45 -> 0.525 is within luck.
QUERIES = pl.concat([
    query_rows(BASE, "entity", [2] * 40),
    query_rows(BEST, "entity", [1] * 20 + [2] * 20),
    query_rows(BASE, "freshness", [1, 1, 2, 2, 0, 0, 4, 4, 1, 0]),
    query_rows(BEST, "freshness", [2, 1, 1, 2, 0, 1, 0, 4, 1, 0]),
])


@pytest.fixture()
def run_dir(tmp_path):
    return write_run(tmp_path / "run", SETTINGS, baseline=BASE, best=BEST, infeasible=INFEASIBLE, queries=QUERIES,
                     sizes={"entity": 40, "freshness": 10, "overall": 50})


def _rows(frame: pl.DataFrame, key: str) -> dict[str, dict]:
    return {r[key]: r for r in frame.iter_rows(named=True)}


def test_best_beside_baseline_per_slice(run_dir):
    table = _rows(best_vs_baseline(read_run_folder(run_dir)), "slice")
    assert list(table) == ["entity", "freshness", "overall"]
    assert table["freshness"]["MRR baseline"] == 0.45 and table["freshness"]["MRR best"] == 0.525
    assert table["freshness"]["MRR Δ"] == pytest.approx(0.075)
    assert table["overall"]["MRR Δ"] == pytest.approx(0.215)
    assert table["entity"]["recall@10 Δ"] == 0
    assert table["overall"]["queries"] == 50


def test_knob_tables_hold_the_other_knobs_at_the_best_setting(run_dir):
    run = read_run_folder(run_dir)
    rrf_k = _rows(knob_table(run, "rrf_k"), "rrf_k")
    assert list(rrf_k) == ["5", "60"]  # at floor off, half-life 30
    assert rrf_k["60"]["freshness MRR"] == 0.6 and rrf_k["60"]["freshness recall@10"] == 0.8
    assert rrf_k["60"]["overall MRR"] == 0.52 and rrf_k["5"]["overall MRR"] == 0.705
    floor = _rows(knob_table(run, "min_similarity"), "min_similarity")
    assert list(floor) == ["off", "0.2"]
    assert floor["0.2"]["feasible"] is False and floor["0.2"]["entity MRR"] == 0.9
    half_life = _rows(knob_table(run, "recency_half_life_days"), "recency_half_life_days")
    assert list(half_life) == ["0 (off)", "30"]
    assert half_life["0 (off)"]["overall MRR"] == 0.56


def test_infeasible_settings_are_grouped_by_slice_and_constraint(run_dir):
    groups = {(r["slice"], r["violated constraint"]): r for r in infeasible_groups(read_run_folder(run_dir)).to_dicts()}
    assert {k: r["settings"] for k, r in groups.items()} == {
        ("entity", "recall_at_10[entity] >= 0.5"): 2,
        ("entity", "mrr[entity] drop <= 0.1 vs baseline"): 2,
        ("freshness", "mrr[freshness] drop <= 0.1 vs baseline"): 2,
        ("freshness", "recall_at_10[freshness] >= 0.5"): 1,
    }
    # Each group names its member with the highest overall MRR: 0.78, which would have beaten the best's 0.705.
    tempting = "highest MRR on overall among them"
    assert groups[("freshness", "mrr[freshness] drop <= 0.1 vs baseline")][tempting] == \
        "rrf_k=5 min_similarity=0.2 half_life=30d (0.7800)"
    assert groups[("entity", "recall_at_10[entity] >= 0.5")][tempting] == \
        "rrf_k=5 min_similarity=0.2 half_life=0d (0.3300)"


def test_recency_cost_matches_the_worked_example():
    assert [ranks_lost(k, 0.87) for k in (60, 20, 5)] == [9, 3, 0]
    assert ranks_lost(60, 1.0) == 0
    # At k = 5, h = 30: factors 0.977, 0.851, 0.5, 0.125 cost 0, 1, 5 and 41 ranks.
    table = recency_cost(5, 30.0, limit=10)
    assert table["memory age (days)"].to_list() == [1, 7, 30, 90, 365]
    assert table["ranks lost"].to_list()[:4] == ["0", "1", "5", "41"]
    assert table["still in top 10"].to_list() == [True, True, True, False, False]


def test_paired_test_separates_a_clear_gain_from_luck():
    clear = paired_test(np.full(30, 0.5))
    assert clear.significant and clear.mean_difference == 0.5 and clear.ci_low == clear.ci_high == 0.5
    luck = paired_test(np.array([-0.5, 0, 0.5, 0, 0, 1, -0.25, 0, 0, 0]))
    assert not luck.significant and luck.ci_low < 0 < luck.ci_high
    assert luck.verdict().startswith("not significant")
    assert paired_test(np.zeros(8)).verdict().startswith("no difference")
    worse = paired_test(np.full(30, -0.2))
    assert worse.significant and worse.verdict().endswith("worse")


def test_holm_adjusts_step_down_and_keeps_the_order():
    # Sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised to 0.06 so that a
    # larger raw p-value never gets a smaller adjusted one.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.7, 0.6, 0.01]) == pytest.approx([1.0, 1.0, 0.03])  # 0.6 x 2 capped at 1; 0.7 raised to it
    assert holm([0.02, 0.02, 0.5]) == pytest.approx([0.06, 0.06, 0.5])  # ties: 0.06, then max(0.06, 0.04)
    assert holm([0.03]) == [0.03] and holm([]) == []


def test_failed_searches_are_left_out_of_the_pairs():
    queries = pl.concat([query_rows("a", "s", [1, 1, None, 2]), query_rows("b", "s", [2, None, 1, 2])])
    d = paired_differences(queries, "a", "b")
    assert d["query_id"].to_list() == ["s-0", "s-3"]
    assert d["d"].to_list() == [0.5, 0.0]


def test_significance_per_slice_and_overall(run_dir):
    run = read_run_folder(run_dir)
    table = _rows(significance_table(run.queries([BEST, BASE]), BEST, BASE, run.slices), "slice")
    assert table["entity"]["queries paired"] == 40 and table["entity"]["Δ MRR"] == pytest.approx(0.25)
    assert table["entity"]["verdict"].startswith("significant")
    assert table["freshness"]["Δ MRR"] == pytest.approx(0.075)
    assert table["freshness"]["verdict"].startswith("not significant")
    assert table["overall"]["queries paired"] == 50 and table["overall"]["Δ MRR"] == pytest.approx(0.215)
    # Two slices tested: Holm doubles the smaller p-value, then keeps the larger one at least as large.
    p_entity, p_freshness = table["entity"]["p-value"], table["freshness"]["p-value"]
    assert p_entity < p_freshness
    assert table["entity"]["p-value (Holm)"] == pytest.approx(2 * p_entity)
    assert table["freshness"]["p-value (Holm)"] == pytest.approx(max(2 * p_entity, p_freshness))
    assert table["overall"]["p-value (Holm)"] is None


def test_a_slice_significant_alone_is_not_after_holm(tmp_path):
    # Three slices; a gains 0.5 on each of its 6 queries (p about 2/64 = 0.031: two of the 64 sign patterns
    # are as extreme, estimated from random flips), b and c do not move. Alone, a is significant; one of three
    # tests, it is not (Holm: 3 x 0.031).
    queries = pl.concat([query_rows(BASE, "a", [2] * 6), query_rows(BEST, "a", [1] * 6),
                         *(query_rows(sid, s, [1, 2, 3]) for s in ("b", "c") for sid in (BASE, BEST))])
    table = _rows(significance_table(queries, BEST, BASE, ["a", "b", "c", "overall"]), "slice")
    raw = table["a"]["p-value"]
    assert raw < 0.05 and table["a"]["p-value (Holm)"] == pytest.approx(3 * raw) and 3 * raw >= 0.05
    assert table["a"]["verdict"].startswith("not significant")
    assert table["b"]["p-value (Holm)"] == 1.0 and table["b"]["verdict"].startswith("no difference")


def test_write_report_says_what_was_chosen_and_embeds_everything(run_dir):
    md_path, html_path = write_report(run_dir)
    md, page = md_path.read_text(), html_path.read_text()
    assert "Best feasible setting in sample: rrf_k=5 min_similarity=off half_life=30d" in md
    assert "MRR on overall 0.7050 against the baseline's 0.4900" in md
    assert re.search(r"\| freshness +\| +10 .*\| +0\.4500 \| +0\.5250 \| +\+0\.0750 \|\n", md)
    assert re.search(r"\| freshness .*not significant", md)
    assert "4 of 8 settings violate at least one constraint" in md
    assert "At rrf_k 5 and a half-life of 30 days" in md
    # Self-contained: three plots (no optimisation history for a grid), no reference to anything outside.
    assert page.count('<img src="data:image/png;base64,') == 3
    assert not re.search(r"(src|href)=\"(?!data:)", page)
    assert "<table>" in page and "0.7050" in page


def test_the_held_out_gain_comes_first(run_dir):
    md = write_report(run_dir)[0].read_text()
    # Only the best and the baseline have per-query rows (the others count as failed searches): every fold's
    # training part picks the best (its freshness MRR never falls 0.1 below the baseline's on 8 of 10 queries),
    # so the held-out gain is the in-sample one.
    line = ("Held-out gain (5-fold CV, stratified by slice): overall MRR +0.2150 (in-sample +0.2150); "
            "folds agree on the setting 5 of 5")
    assert line in md and md.index(line) < md.index("## Best feasible setting beside the baseline")
    assert re.search(r"\| entity +\| +40 \|.*\| +\+0\.2500 \| +\+0\.2500 \|\n", md)
    assert f"5 of 5 folds chose {BEST} (as on all queries)" in md


def test_cross_validation_can_be_turned_off(tmp_path):
    run_dir = write_run(tmp_path / "run", SETTINGS, baseline=BASE, best=BEST, infeasible=INFEASIBLE,
                        queries=QUERIES, config={**CONFIG, "validation": False})
    md = write_report(run_dir)[0].read_text()
    assert "Held-out gain" not in md and "No cross-validation: the config turns cross-validation off" in md


def test_a_one_query_golden_set_is_the_reason_given_for_no_held_out_figures(tmp_path):
    one = {"entity": (1, 1, .5), "overall": (1, 1, .5)}
    queries = pl.concat([query_rows(BASE, "entity", [2]), query_rows(BEST, "entity", [1])])
    run_dir = write_run(tmp_path / "run", {BASE: one, BEST: {**one, "entity": (1, 1, 1), "overall": (1, 1, 1)}},
                        baseline=BASE, best=BEST, queries=queries, sizes={"entity": 1, "overall": 1})
    md = write_report(run_dir)[0].read_text()
    reason = "the golden set has 1 query, and cross-validation needs at least two to split"
    assert f"No cross-validation: {reason}." in md and f"No routing table: {reason} (" in md
    assert "kept its held-out figures" not in md and "turns cross-validation off" not in md


def test_a_server_that_refuses_rrf_k_and_the_half_life_gets_no_section_on_them(tmp_path):
    floor = "k60_m0.3_h0.0"
    settings = {BASE: SETTINGS[BASE], floor: {**SETTINGS[BASE], "overall": (.95, .95, .5)}}
    queries = pl.concat([query_rows(BASE, "entity", [2] * 4), query_rows(floor, "entity", [1, 2, 2, 2])])
    profile = {"backend": "http", "version": "0.28.0", "ranking": "pure cosine", "knobs_accepted": ["min_similarity"],
               "knobs_refused": {"recency_half_life_days": "HTTP 400", "rrf_k": "HTTP 400"}, "mode": "direct"}
    run_dir = write_run(tmp_path / "run", settings, baseline=BASE, best=floor, queries=queries, profile=profile)
    md = write_report(run_dir)[0].read_text()
    assert "### min_similarity" in md
    assert ("rrf_k and recency_half_life_days are not shown: the server refuses them, so every search ran at "
            "SOAT's default") in md
    for gone in ("### rrf_k", "### recency_half_life_days", "rrf_k x half-life heatmap", "What the recency blend costs"):
        assert gone not in md, gone


def test_report_of_a_run_without_a_feasible_setting(tmp_path):
    settings = {BASE: SETTINGS[BASE], "k60_m0.2_h0.0": SETTINGS["k60_m0.2_h0.0"]}
    run_dir = write_run(tmp_path / "run", settings, baseline=BASE, best=None,
                        infeasible={sid: ["incomplete"] for sid in settings})
    md = write_report(run_dir)[0].read_text()
    assert "No feasible setting" in md and "How sure we are" not in md
    assert "MRR best" not in md
    assert "The recency blend is off at the chosen setting" in md
    assert "No rrf_k x half-life heatmap" in md  # one cell is no grid


def test_the_heatmap_hatches_cells_without_a_feasible_setting(tmp_path):
    # Over min_similarity {off, 0.2}: at (rrf_k 60, half-life 30) both are infeasible; at (5, 0) only the floor
    # 0.2 is feasible, with a lower MRR (0.33) than the infeasible "off" (0.56).
    infeasible = {sid: ["mrr[freshness]:max_drop"]
                  for sid in ["k60_moff_h30.0", "k60_m0.2_h30.0", "k5_moff_h0.0", "k5_m0.2_h30.0"]}
    run = read_run_folder(write_run(tmp_path / "run", SETTINGS, baseline=BASE, best=BEST, infeasible=infeasible))
    fig = plots.best_feasible_heatmap(run)
    ax = fig.axes[0]
    image = ax.images[0].get_array()  # rows rrf_k (5, 60), columns half-life (0, 30)
    assert image.mask.tolist() == [[False, False], [False, True]]
    assert image.data[0].tolist() == [0.33, 0.705] and image.data[1][0] == 0.49
    (hatched,) = [p for p in ax.patches if p.get_hatch()]
    corners = hatched.get_path().vertices
    assert corners.min(axis=0).tolist() == [0.5, 0.5] and corners.max(axis=0).tolist() == [1.5, 1.5]
    assert len(corners) == 5  # the cell at column 1, row 1, and only it
    assert hatched.get_label() == "no feasible setting"
    boxed = [p for p in ax.patches if p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)]
    assert [(p.get_x(), p.get_y()) for p in boxed] == [(0.5, -0.5)]  # the best: rrf_k 5, half-life 30
    assert sorted(t.get_text() for t in ax.texts) == ["0.330\n@0.2", "0.490\n@off", "0.705\n@off"]
    assert ax.get_title().startswith("Best feasible overall MRR per (rrf_k, half-life) over min_similarity; "
                                     "hatched: no feasible setting")


def test_one_knob_panels_band_infeasible_values_grey(run_dir):
    run = read_run_folder(run_dir)
    fig = plots.slice_mrr_by_knob(run, {knob: knob_table(run, knob) for knob in KNOBS})
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["rrf_k, at min_similarity off, recency_half_life_days 30",
                      "min_similarity, at rrf_k 5, recency_half_life_days 30",
                      "recency_half_life_days, at rrf_k 5, min_similarity off"]
    # Held at the best (floor off, half-life 30 / rrf_k 5): only the floor 0.2 (position 1) is infeasible.
    bands = [[p.get_x() for p in ax.patches if p.get_label() == "infeasible"] for ax in fig.axes]
    assert bands == [[], [0.5], []]


def test_optimise_runs_get_scatter_plots(tmp_path):
    config = {**CONFIG, "sweep": {"strategy": "optimize", "knobs": {}}}
    run_dir = write_run(tmp_path / "run", SETTINGS, baseline=BASE, best=BEST, infeasible=INFEASIBLE, config=config,
                        queries=QUERIES)
    run = read_run_folder(run_dir)
    fig = plots.objective_by_knob(run)
    for ax, knob in zip(fig.axes, KNOBS):
        feasible, infeasible, best = (c.get_offsets() for c in ax.collections)
        assert len(feasible) == 4 and len(infeasible) == 4 and best.tolist() == [[
            {"rrf_k": 5, "min_similarity": -0.05, "recency_half_life_days": 30}[knob], 0.705]]
        assert sorted(infeasible[:, 1].tolist()) == [0.25, 0.33, 0.44, 0.78]
        assert ax.get_title() == f"overall MRR against {knob}"
    md = write_report(run_dir)[0].read_text()
    assert "sampled settings rather than filling a grid, so its plots are scatters" in md
    assert "*Plot: overall MRR of every sampled setting against each knob; grey crosses: infeasible" in md
    assert "Plot: Best feasible" not in md and "Plot: MRR per slice" not in md
    assert write_report(run_dir)[1].read_text().count("data:image/png;base64,") == 3


def test_a_folder_without_a_grid_is_invalid_input(tmp_path):
    (tmp_path / "run.json").write_text('{"status": "complete"}')
    with pytest.raises(InputError, match="grid.parquet"):
        write_report(tmp_path)


def test_a_run_written_before_violation_keys_and_kept_cross_validation_still_gets_a_report(tmp_path):
    run_dir = write_run(tmp_path / "run", SETTINGS, baseline=BASE, best=BEST, infeasible=INFEASIBLE, queries=QUERIES)
    grid = pl.read_parquet(run_dir / "grid.parquet").with_columns(pl.col("violations").list.join("; "))
    metadata = {k.decode(): v.decode() for k, v in pq.read_schema(run_dir / "grid.parquet").metadata.items()
                if k != b"rqsweep.validation"}
    write_parquet(run_dir / "grid.parquet", grid, metadata)  # as an older rqsweep wrote it
    md = write_report(run_dir)[0].read_text()
    assert "No cross-validation: this run was written before rqsweep kept its held-out figures" in md
    assert "run the sweep again to have them grouped here" in md
    assert "Best feasible setting" in md


@pytest.mark.parametrize("marked", [0, 5, 13])
def test_an_axis_with_the_limit_of_labels_keeps_every_one(marked):
    assert plots.labelled(plots.TICK_LABELS, marked) == list(range(plots.TICK_LABELS))


@pytest.mark.parametrize("n", [plots.TICK_LABELS + 1, 50, 100])
@pytest.mark.parametrize("at", [0.0, 0.37, 0.5, 1.0])
def test_one_label_more_thins_them_keeping_the_ends_and_the_marked_setting(n, at):
    marked = round(at * (n - 1))
    shown = plots.labelled(n, marked)
    assert len(shown) <= plots.TICK_LABELS and shown == sorted(set(shown))
    assert {0, n - 1, marked} <= set(shown)
    even = plots.labelled(n, 0)  # the first is always labelled, so this is the even spread alone
    assert shown == sorted({*even, marked}) and np.ptp(np.diff(even)) <= 1


def test_a_dense_grid_labels_at_most_the_limit_per_axis_with_the_best_among_them(tmp_path):
    ks, hs = list(range(1, 21)), [float(h) for h in range(0, 160, 10)]  # 20 x 16 cells, both past TICK_LABELS
    best = "k7_moff_h70.0"  # on neither the even spread's positions nor an edge
    settings = {f"k{k}_moff_h{h}": {"entity": (1, 1, 0.5), "overall": (1, 1, 0.9 if (k, h) == (7, 70.0) else 0.5)}
                for k in ks for h in hs}
    run = read_run_folder(write_run(tmp_path / "run", settings, baseline="k1_moff_h0.0", best=best))
    ax = plots.best_feasible_heatmap(run).axes[0]
    x = [t.get_text() for t in ax.get_xticklabels()]
    y = [t.get_text() for t in ax.get_yticklabels()]
    assert len(x) <= plots.TICK_LABELS and len(y) <= plots.TICK_LABELS
    assert {"1", "7", "20"} <= set(y) and len(y) == len(set(y))
    assert {"0 (off)", "70", "150"} <= set(x)
    panels = plots.slice_mrr_by_knob(run, {knob: knob_table(run, knob) for knob in KNOBS}).axes
    rrf_k_labels = [t.get_text() for t in panels[0].get_xticklabels()]
    assert len(rrf_k_labels) <= plots.TICK_LABELS and {"1", "7", "20"} <= set(rrf_k_labels)
