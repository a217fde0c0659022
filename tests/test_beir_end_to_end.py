"""A BEIR-shaped folder the test writes (300 documents, 50 queries, graded qrels, a slice sidecar) runs end to end,
and the TREC run exported for a setting, scored by pytrec_eval, gives that setting's rows of grid.parquet."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from rqsweep.cli import main
from tests.test_reference_metrics import measure

pytrec_eval = pytest.importorskip("pytrec_eval")

SLICES = ("lookup", "topic", "phrase")
METRICS = ["recall_at_5", "recall_at_10", "mrr", "ndcg_at_10", "precision_at_5", "hit_at_3", "r_precision"]


def write_beir(folder: Path, seed: int = 3) -> None:
    """Documents of words from a small vocabulary (a third long enough for several chunks); each query takes words
    of one document (graded 2 or 3), judges 1 or 2 others sharing a word 1, and one 0."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i:03d}" for i in range(600)]
    docs = {f"d{i:03d}": rng.choice(vocabulary, size=int(rng.choice([30, 60, 200]))).tolist() for i in range(300)}
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": k, "title": f"Page {k}", "text": " ".join(words)}) + "\n" for k, words in docs.items()))
    queries, qrels, sidecar = [], ["query-id\tcorpus-id\tscore"], []
    keys = list(docs)
    for i in range(50):
        qid, target = f"q{i:02d}", keys[int(rng.integers(len(keys)))]
        words = rng.choice(docs[target], size=3, replace=False).tolist()
        queries.append(json.dumps({"_id": qid, "text": " ".join(words)}))
        sharing = [k for k in keys if k != target and words[0] in docs[k]][:2]
        unrelated = next(k for k in keys[(i * 7) % 300:] + keys if k != target and k not in sharing)
        qrels += [f"{qid}\t{target}\t{int(rng.integers(2, 4))}", *(f"{qid}\t{k}\t1" for k in sharing),
                  f"{qid}\t{unrelated}\t0"]
        sidecar.append(f"{qid}\t{SLICES[i % 3]}")
    (folder / "queries.jsonl").write_text("\n".join(queries) + "\n")
    (folder / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    (folder.parent / "slices.tsv").write_text("\n".join(sidecar) + "\n")


def run_beir(folder: Path, **overrides) -> Path:
    """The BEIR folder's run (six settings unless `overrides` say otherwise): its run folder."""
    write_beir(folder / "scifake")
    config = {
        "name": "beir", "golden": {"path": "scifake", "split": "test", "slices": {"file": "slices.tsv"}},
        "backend": {"kind": "embedded", "embedder": {"kind": "feature-hash", "dimensions": 256},
                    "chunking": {"strategy": "size", "chunk_size": 400, "chunk_overlap": 80}},
        "sweep": {"strategy": "grid", "knobs": {"rrf_k": {"values": [1, 20, 60]},
                                                "min_similarity": {"include_off": True, "values": [0.2]}}},
        "metrics": METRICS, "objective": {"metric": "ndcg_at_10", "slice": "overall"},
        "constraints": [{"metric": "recall_at_10", "slice": "*", "max_drop": 0.5}],
        "validation": False, "output_dir": "results", **overrides,
    }
    (folder / "beir.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert main([str(folder / "beir.yaml"), "--quiet"]) == 0
    return next((folder / "results" / "beir").iterdir())


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return run_beir(tmp_path_factory.mktemp("beir"))


def test_a_beir_folder_runs_end_to_end_with_its_graded_qrels_and_slice_sidecar(run_dir):
    grid = pl.read_parquet(run_dir / "grid.parquet")
    assert sorted(grid["slice"].unique().to_list()) == sorted([*SLICES, "overall"])
    assert grid.filter(pl.col("slice") == "overall")["queries"].unique().to_list() == [50]
    assert grid["setting_id"].n_unique() == 6
    queries = pl.read_parquet(run_dir / "queries.parquet")
    # Grade-0 judgements are not expected items; every query keeps its target and the documents sharing a word.
    one = queries.filter(pl.col("setting_id") == grid["setting_id"][0])
    assert one["expected"].list.len().min() >= 1
    # Each expected key's grade, as the qrels give it: every query's target is graded 2 or 3, the others 1.
    assert (one["grades"].list.len() == one["expected"].list.len()).all()
    assert set(one["grades"].list.max()) <= {2, 3} and set(one["grades"].explode()) == {1, 2, 3}
    # Graded gains: a query whose grade-1 item ranks first and whose grade-3 item is absent scores below 1.
    assert (queries["ndcg_at_10"] < queries["hit_at_3"]).any()


def reference_grid(run_dir: Path, setting: str, tmp_path: Path, level: int = 1) -> dict[tuple[str, str], float]:
    """(slice, metric) -> pytrec_eval's per-query values of the exported run at relevance level `level`, averaged
    as the grid averages them."""
    out = tmp_path / setting
    assert main(["export", str(run_dir), "--setting", setting, "--format", "trec", "--output-dir", str(out)]) == 0
    run_file = next(out.glob("*.run"))
    run: dict[str, dict[str, float]] = {}
    for line in run_file.read_text().splitlines():
        qid, q0, doc, rank, score, tag = line.split()
        run.setdefault(qid, {})[doc] = float(score)
    qrels: dict[str, dict[str, int]] = {}
    for line in (out / "qrels.txt").read_text().splitlines():
        qid, _, doc, grade = line.split()
        qrels.setdefault(qid, {})[doc] = int(grade)
    scored = pytrec_eval.RelevanceEvaluator(qrels, {measure(m)[0] for m in METRICS},
                                            relevance_level=level).evaluate(run)
    slice_of = dict(line.split("\t") for line in (run_dir.parents[2] / "slices.tsv").read_text().splitlines())
    values: dict[tuple[str, str], list[float]] = {}
    for qid in qrels:  # a query the run file does not hold returned nothing: 0, as rqsweep scores it
        for m in METRICS:
            v = scored.get(qid, {}).get(measure(m)[1], 0.0)
            values.setdefault((slice_of[qid], m), []).append(v)
            values.setdefault(("overall", m), []).append(v)
    return {key: float(np.mean(v)) for key, v in values.items()}, run_file.stem


@pytest.mark.parametrize("setting", ["best", "baseline", "k20_m0.2_h0.0"])
def test_the_exported_trec_run_scored_by_pytrec_eval_gives_the_settings_grid_rows(run_dir, tmp_path, setting):
    want, setting_id = reference_grid(run_dir, setting, tmp_path)
    stored = set(pl.read_parquet(run_dir / "hits.parquet")["setting_id"].to_list())
    assert (setting_id in stored) == (setting != "k20_m0.2_h0.0")  # the last is recomputed from the config
    grid = pl.read_parquet(run_dir / "grid.parquet").filter(pl.col("setting_id") == setting_id)
    assert grid.height == len(SLICES) + 1
    for row in grid.iter_rows(named=True):
        for m in METRICS:
            assert row[m] == pytest.approx(want[row["slice"], m], abs=1e-12), (setting_id, row["slice"], m)


def test_relevance_level_2_gives_pytrec_evals_values_at_level_2(tmp_path):
    # Every query judges its target 2 or 3 and one or two others 1: at level 2, the 1s do not count.
    run_dir = run_beir(tmp_path, relevance_level=2, sweep={"strategy": "grid", "knobs": {"rrf_k": {"values": [60]}}})
    want, setting_id = reference_grid(run_dir, "best", tmp_path / "at-2", level=2)
    at_1, _ = reference_grid(run_dir, "best", tmp_path / "at-1", level=1)
    assert want["overall", "recall_at_10"] != pytest.approx(at_1["overall", "recall_at_10"])
    for row in pl.read_parquet(run_dir / "grid.parquet").filter(pl.col("setting_id") == setting_id).iter_rows(
            named=True):
        for m in METRICS:
            assert row[m] == pytest.approx(want[row["slice"], m], abs=1e-12), (row["slice"], m)


def test_export_refuses_a_setting_the_run_did_not_evaluate(run_dir, capsys):
    assert main(["export", str(run_dir), "--setting", "k7_moff_h0.0"]) == 2
    err = capsys.readouterr().err
    assert "'k7_moff_h0.0': not a setting of this run" in err and "Traceback" not in err


def test_run_and_qrels_lines_percent_encode_whitespace_and_mark_a_documents_later_slots():
    from rqsweep.report.export import run_lines

    assert run_lines("q 1", ["it/my page.md", "m", "it/my page.md"], "t") == [
        "q%201 Q0 it/my%20page.md 1 3 t", "q%201 Q0 m 2 2 t", "q%201 Q0 it/my%20page.md#3 3 1 t"]


def test_explain_shows_the_grades_of_a_graded_golden_set(run_dir, capsys):
    assert main(["explain", str(run_dir), "q00"]) == 0
    expected = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Expected: "))
    queries = pl.read_parquet(run_dir / "queries.parquet").filter(pl.col("query_id") == "q00").row(0, named=True)
    assert expected.startswith("Expected: " + ", ".join(f"{k}={g}" for k, g in zip(queries["expected"],
                                                                                 queries["grades"])))
