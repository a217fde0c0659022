"""The streamed end of a run (state read a part at a time, queries.parquet written in row groups, slice means and
fold sums gathered as it goes) against the whole-table reference: every (setting, query) row in memory at once,
superseded, scored and aggregated in one go. Outputs must be equal bit for bit."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rqsweep import files, metrics
from rqsweep.backends import build_backend
from rqsweep.backends.base import OUTCOME_SCHEMA
from rqsweep.decide.constraints import SliceMeans, choose_best
from rqsweep.files import write_parquet_groups
from rqsweep.inputs import load_inputs
from rqsweep.sweep import Sweep
from rqsweep.knobs import Knobs
from rqsweep.progress import Progress
from rqsweep.runfolder import RunState
from rqsweep.decide.accumulate import setting_knobs
from rqsweep.runfolder.tables import Stamp, golden_table, grid_table, query_table
from rqsweep.decide.cross_validation import FoldSums, cross_validate
from tests.minijob import QUERIES, write_job

METRICS = ["recall_at_5", "recall_at_10", "mrr", "ndcg_at_3"]
CONSTRAINTS = [{"metric": "recall_at_10", "slice": "*", "max_drop": 0.2}, {"metric": "mrr", "slice": "entity",
                                                                            "min": 0.3}]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    config = write_job(tmp_path_factory.mktemp("job"), metrics=METRICS, constraints=CONSTRAINTS,
                       validation={"folds": 3, "seed": 7})
    return load_inputs(config)


@pytest.fixture(scope="module")
def backend(inputs, tmp_path_factory):
    """The embedded engine: finish searches the baseline once, for the query features routing by rule reads."""
    return build_backend(inputs.config, inputs.searched, inputs.corpus, workers=1, log=lambda _: None,
                         run_dir=tmp_path_factory.mktemp("engine"))


def _rows(knobs: Knobs, outcomes: list[int | None | str]) -> pl.DataFrame:
    """One setting's rows: per query a position (0 = absent) or an error text."""
    n = len(QUERIES)
    return pl.DataFrame({
        "setting_id": [knobs.id] * n, **{k: [v] * n for k, v in knobs.columns().items()},
        "query_id": [q[0] for q in QUERIES],
        "positions": [None if isinstance(o, str) else [o or None] for o in outcomes],
        "error": [o if isinstance(o, str) else None for o in outcomes],
        "tie_sensitive": [o == 2 for o in outcomes], "numeric_sensitive": [False for _ in outcomes],
    }, schema=OUTCOME_SCHEMA)


outcome = st.one_of(st.integers(0, 12), st.just("ReadTimeout: the server did not answer"))


@st.composite
def histories(draw):
    """A run's history: parts of whole settings in recording order (a setting may be evaluated again in a later
    part), and how many of the first parts a finished run already consolidated into queries.parquet."""
    pool = [Knobs(k, m, h) for k in (1, 5, 60) for m in (None, 0.2) for h in (0.0, 30.0)]
    baseline = Knobs(60, None, 0.0)
    n_parts = draw(st.integers(1, 5))
    parts, seen = [], []
    for p in range(n_parts):
        chosen = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=5, unique_by=lambda k: k.id))
        if p == 0 and baseline not in chosen:
            chosen = [baseline, *chosen]
        parts.append(pl.concat([_rows(k, draw(st.lists(outcome, min_size=len(QUERIES), max_size=len(QUERIES))))
                                for k in chosen]))
        seen += chosen
    consolidated = draw(st.integers(0, n_parts))
    rows_per_group = draw(st.integers(1, 40))
    return parts, consolidated, rows_per_group


def _superseded(rows: pl.DataFrame) -> pl.DataFrame:
    """The reference rule over every row at once: the latest row of each (setting, query), settings in the order
    of their first appearance."""
    rows = rows.with_row_index("at")
    return (rows.with_columns(pl.col("at").min().over("setting_id").alias("first"))
            .filter(pl.col("at") == pl.col("at").max().over("setting_id", "query_id"))
            .sort("first", "at").drop("at", "first"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories())
def test_the_streamed_outputs_equal_the_whole_table_reference_bit_for_bit(inputs, backend, tmp_path_factory,
                                                                         history):
    parts, consolidated, rows_per_group = history
    run_dir = tmp_path_factory.mktemp("run")
    if consolidated:
        # What a finished run left: its queries.parquet (whole settings per row group), its parts gone.
        done = _superseded(pl.concat(parts[:consolidated]))
        frames = [group for _, group in done.group_by("setting_id", maintain_order=True)]
        write_parquet_groups(run_dir / "queries.parquet", frames, rows_per_group=rows_per_group)
    sweep = Sweep(inputs, backend, run_dir, "r1", Progress(0, "test", quiet=True))
    for part in parts[consolidated:]:
        sweep.state.record(part)
    metadata = {"rqsweep.test": "1"}
    streamed = sweep.finish(metadata)

    names, config = inputs.metrics, inputs.config
    objective = (config.objective.metric, config.objective.slice)
    reference_rows = _superseded(pl.concat(parts))
    scored = sweep.scored(reference_rows)
    per_slice = metrics.slice_metrics(scored, names)
    knobs = setting_knobs(reference_rows)
    means = SliceMeans.from_frame(per_slice, knobs["setting_id"].to_list(), inputs.golden.slices, names)
    verdicts = choose_best(means, config.baseline.id, objective, config.constraints, inputs.golden.slices)
    stamp = Stamp.of("r1", inputs)
    grid = grid_table(per_slice, knobs, verdicts, config.baseline.id, names, stamp)
    queries = query_table(scored, golden_table(inputs.golden), names, stamp)

    assert streamed.grid.equals(grid)
    written = pl.read_parquet(run_dir / "queries.parquet")
    assert written.equals(queries)
    assert pq.read_schema(run_dir / "queries.parquet").metadata[b"rqsweep.test"] == b"1"
    assert streamed.best == verdicts.best and streamed.decided.verdicts.rejected() == verdicts.rejected()
    assert streamed.decided.settings.equals(knobs)

    folds = FoldSums(golden_table(inputs.golden), inputs.golden.slices, names, config.validation,
                     len(knobs))
    folds.add(scored)
    whole = cross_validate(folds, lambda ids: scored.filter(pl.col("setting_id").is_in(ids)), config.baseline.id,
                           objective, config.constraints)
    assert streamed.decided.validation.as_json() == whole.as_json()

    # The written table stands in for the parts: a resumed run reads back the same rows.
    sweep.state.discard_parts()
    assert not list((run_dir / "state").glob("part-*.parquet"))
    again = RunState(run_dir / "state", OUTCOME_SCHEMA, consolidated=run_dir / "queries.parquet")
    assert pl.concat(list(again.chunks())).equals(reference_rows)
    assert again.finished() == set(reference_rows.group_by("setting_id").agg(pl.col("error").is_null().all())
                                   .filter("error")["setting_id"].to_list())


def test_a_part_never_splits_a_frame_across_row_groups(tmp_path):
    frames = [pl.DataFrame({"a": list(range(n))}) for n in (3, 5, 2, 7)]
    write_parquet_groups(tmp_path / "t.parquet", frames, rows_per_group=6)
    sizes = [g.num_rows for g in (pq.ParquetFile(tmp_path / "t.parquet").metadata.row_group(i)
                                  for i in range(pq.ParquetFile(tmp_path / "t.parquet").num_row_groups))]
    assert sizes == [8, 9]  # 3+5 reach 6, then 2+7; no frame is cut
    assert pl.read_parquet(tmp_path / "t.parquet")["a"].to_list() == [x for f in frames for x in f["a"].to_list()]


def test_a_source_failing_after_row_groups_were_handed_to_the_writer_leaves_no_file(tmp_path):
    def frames():
        for n in range(4):
            yield pl.DataFrame({"a": list(range(n * 10, n * 10 + 10))})
        raise RuntimeError("scoring failed")

    with pytest.raises(RuntimeError, match="scoring failed"):
        write_parquet_groups(tmp_path / "t.parquet", frames(), rows_per_group=10)
    assert list(tmp_path.iterdir()) == []


def test_a_row_group_unlike_the_first_is_the_callers_error_and_leaves_no_file(tmp_path):
    # The second row group cannot be cast to the first's schema while the first is still being written.
    frames = [pl.DataFrame({"a": list(range(200_000))}), pl.DataFrame({"a": ["x", "y"]})]
    with pytest.raises(pa.ArrowInvalid, match="as a scalar of type int64"):
        write_parquet_groups(tmp_path / "t.parquet", iter(frames), rows_per_group=1)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_while_a_row_group_is_written_waits_for_it_before_closing_the_writer(tmp_path, monkeypatch):
    """A signal landing while the last row group is written (a run's end interrupted): the writer is closed only
    once the write is done (closed under it, pyarrow crashed the process), and no file is left."""
    import signal
    import threading

    events: list[str] = []
    main, closing, interrupted = threading.get_ident(), threading.Event(), threading.Event()
    close = files.ParquetGroups.close

    def close_and_say(self):
        closing.set()
        return close(self)

    class SlowWriter(pq.ParquetWriter):
        def write_table(self, table, row_group_size=None):
            events.append("write")
            assert closing.wait(timeout=300)
            # The interrupt lands in close(), this row group unwritten; sent again until handled, since a signal
            # arriving just as the main thread starts to wait on a lock goes unseen until the next one.
            while not interrupted.wait(timeout=0.1):
                signal.pthread_kill(main, signal.SIGALRM)
            super().write_table(table, row_group_size=row_group_size)
            events.append("written")

        def close(self):
            events.append("close")
            super().close()

    def interrupt(*_):
        if not interrupted.is_set():  # once: a signal sent again as the first was handled changes nothing
            interrupted.set()
            raise KeyboardInterrupt

    monkeypatch.setattr(pq, "ParquetWriter", SlowWriter)
    monkeypatch.setattr(files.ParquetGroups, "close", close_and_say)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            write_parquet_groups(tmp_path / "t.parquet", [pl.DataFrame({"a": [1, 2]})], rows_per_group=1)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert events == ["write", "written", "close"]
    assert list(tmp_path.iterdir()) == []


def test_queries_parquet_keeps_statistics_only_for_the_columns_its_readers_filter_on(tmp_path):
    from rqsweep.runfolder.tables import QUERY_STATISTICS, write_queries

    frame = pl.DataFrame({"setting_id": ["s1", "s2"], "query_id": ["q1", "q2"], "query": ["a text", "b text"],
                          "positions": [[1, 2], [3]], "error": [None, "timeout"]})
    path = write_queries(tmp_path, [frame.head(1), frame.tail(1)], {"rqsweep.test": "1"})
    group = pq.ParquetFile(path).metadata.row_group(0)
    with_statistics = {group.column(i).path_in_schema for i in range(group.num_columns)
                       if group.column(i).is_stats_set}
    assert with_statistics == set(QUERY_STATISTICS)
    assert pl.read_parquet(path).equals(frame)
    # A read filtered on setting_id still finds its rows.
    assert pl.scan_parquet(path).filter(pl.col("setting_id") == "s2").collect().equals(frame.tail(1))


def test_a_table_is_written_a_slice_at_a_time_each_with_only_its_own_list_values(tmp_path, monkeypatch):
    # A slice of a list column holds all of the column's values: turned to Arrow as it is, every slice copied them.
    frame = pl.DataFrame({"setting_id": [f"setting-{i:04d}-of-five" for i in range(5)],
                          "violations": [["mrr[entity]:max_drop"] * i for i in range(5)]})
    converted, arrow = [], files._arrow
    monkeypatch.setattr(files, "ROWS_PER_WRITE", 2)
    monkeypatch.setattr(files, "_arrow", lambda part, metadata: converted.append(part) or arrow(part, metadata))
    files.write_parquet(tmp_path / "t.parquet", frame, {"rqsweep.version": "x"})
    assert pl.read_parquet(tmp_path / "t.parquet").equals(frame)
    assert pq.read_schema(tmp_path / "t.parquet").metadata[b"rqsweep.version"] == b"x"
    assert [len(p.to_arrow().column("violations").chunks[0].values) for p in converted] == [1, 5, 4]
