"""The embedded backend's start (every golden query's candidates) is kept in the run folder as it goes: an interrupt
there leaves a folder that `--resume` continues, extracting only what was not extracted, and the start shows its
progress on stderr."""

from __future__ import annotations

import json

import polars as pl
import pytest

from rqsweep import cli
from rqsweep.backends import candidate_blocks, scoring
from rqsweep.backends.candidate_blocks import CandidateBlocks
from rqsweep.engine.embed import described
from rqsweep.engine.index import Index
from rqsweep.knobs import Knobs
from tests.minijob import write_job

BLOCK = 3  # queries per block here: the mini job's 10 queries make 4 blocks


@pytest.fixture
def extracted(monkeypatch) -> list[int]:
    """Small blocks, and the number of queries of each extraction made (blocks read back make none)."""
    monkeypatch.setattr(scoring, "_EXTRACTION_BLOCK", BLOCK)
    sizes: list[int] = []
    original = Index.candidates_many

    def counted(self, queries, *args, **kwargs):
        sizes.append(len(queries))
        return original(self, queries, *args, **kwargs)

    monkeypatch.setattr(Index, "candidates_many", counted)
    return sizes


def _grid(run_dir) -> pl.DataFrame:
    return pl.read_parquet(run_dir / "grid.parquet").drop("run_id").sort("setting_id", "slice")


def test_an_interrupted_start_keeps_its_folder_and_resume_extracts_only_the_rest(tmp_path, monkeypatch, capsys,
                                                                                 extracted):
    config = write_job(tmp_path)
    saved = []
    original_save = CandidateBlocks.save

    def interrupted_after_two(self, start, found):
        if len(saved) == 2:
            raise KeyboardInterrupt
        original_save(self, start, found)
        saved.append(start)

    monkeypatch.setattr(CandidateBlocks, "save", interrupted_after_two)
    assert cli.main([str(config), "--quiet"]) == 130
    err = capsys.readouterr().err
    (run_dir,) = (tmp_path / "results" / "mini").iterdir()  # before, the start's folder was deleted
    assert f"--resume {run_dir}" in err and "Traceback" not in err
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert sorted(p.name for p in (run_dir / candidate_blocks.FOLDER).iterdir()) == [
        "candidates-000000000.npz", "candidates-000000003.npz"]

    monkeypatch.setattr(CandidateBlocks, "save", original_save)
    extracted.clear()
    assert cli.main([str(config), "--resume", str(run_dir)]) == 0
    assert extracted == [3, 1]  # the two blocks kept are read back; the two others are extracted
    err = capsys.readouterr().err
    assert "mini candidates: 10/10 queries" in err

    extracted.clear()
    assert cli.main([str(write_job(tmp_path / "whole"))]) == 0
    assert extracted == [3, 3, 3, 1]
    (whole,) = (tmp_path / "whole" / "results" / "mini").iterdir()
    assert _grid(run_dir).equals(_grid(whole))


def test_a_block_that_cannot_be_read_back_or_another_embedder_made_is_extracted_again(tmp_path, extracted):
    from rqsweep.backends.embedded import build_embedded_backend
    from rqsweep.inputs import load_inputs

    inputs = load_inputs(write_job(tmp_path))
    build = lambda: build_embedded_backend(inputs.config, inputs.golden, inputs.corpus, workers=1,  # noqa: E731
                                           log=lambda _: None, run_dir=tmp_path)
    first = build()
    kept = sorted((tmp_path / candidate_blocks.FOLDER).iterdir())
    assert len(kept) == 4 and extracted == [3, 3, 3, 1]
    assert CandidateBlocks(tmp_path, described(first.index.embedder)).load(0, BLOCK) is not None
    assert CandidateBlocks(tmp_path, "feature-hash/512").load(0, BLOCK) is None  # another embedder's
    kept[1].write_bytes(kept[1].read_bytes()[:40])  # torn
    kept[2].write_bytes(b"not a block")
    extracted.clear()
    again = build()
    assert extracted == [3, 3]
    assert again.candidates == first.candidates
    settings = [Knobs(), Knobs(rrf_k=5, recency_half_life_days=30)]
    assert again.evaluate(settings).equals(first.evaluate(settings))
