"""The nightly recipe of docs/nightly.md: its cron line runs scripts/nightly.sh, here in /bin/sh (cron's shell) on a
fresh checkout (no logs/), with a `mail` that records what it is given."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.minijob import write_job

ROOT = Path(__file__).resolve().parents[1]
SWEEP = {"strategy": "grid", "knobs": {"rrf_k": {"values": [5, 60]}}}


def _cron_command() -> str:
    """The command of docs/nightly.md's cron line (what follows the schedule), run from the checkout."""
    line = re.search(r"^17 3 \* \* \*  cd /srv/rqsweep && (.*)$", (ROOT / "docs" / "nightly.md").read_text(),
                     re.MULTILINE)[1]
    return line.replace("configs/handbook.yaml", "job.yaml").replace("ci/rqsweep-gate.json", "ci/gate.json")


def _night(site: Path, mail: Path) -> int:
    env = {**os.environ, "PATH": f"{mail.parent}{os.pathsep}{os.environ['PATH']}",
           "RQSWEEP": str(ROOT / ".venv" / "bin" / "rqsweep")}
    shutil.copytree(ROOT / "scripts", site / "scripts", dirs_exist_ok=True)
    return subprocess.run(["/bin/sh", "-c", _cron_command()], cwd=site, env=env, timeout=600).returncode


def _runs(site: Path) -> list[Path]:
    return sorted((site / "results" / "mini").iterdir())


def test_the_cron_line_on_a_fresh_checkout_gates_each_night_against_the_last_run_of_the_same_inputs(tmp_path):
    site = tmp_path / "site"
    config = write_job(site, SWEEP)
    mail = tmp_path / "bin" / "mail"
    mail.parent.mkdir()
    mail.write_text(f'#!/bin/sh\n{{ echo "mail $*"; cat; }} >> {tmp_path / "mailed"}\n')
    mail.chmod(0o755)

    # The first night: no gate file yet. Invalid input, said as such, and the log made.
    assert _night(site, mail) == 2
    mailed = (tmp_path / "mailed").read_text()
    assert mailed.startswith("mail -s rqsweep nightly: invalid input (config, corpus, golden set, gate file or run "
                             "folder) or an unwritable output (exit 2) search-team@example.com\n")
    assert "ci/gate.json: no such gate file" in mailed and "ci/gate.json: no such gate file" in (
        site / "logs" / "nightly.log").read_text()
    (tmp_path / "mailed").unlink()

    # The gate file accepted, two nights pass: the second compares with the first.
    (site / "ci").mkdir()
    subprocess.run([ROOT / ".venv" / "bin" / "rqsweep", "job.yaml", "--quiet", "--gate-file", "ci/gate.json",
                    "--update-gate-file"], cwd=site, check=True, capture_output=True)
    assert _night(site, mail) == 0
    first, night = _runs(site)[0], _runs(site)[1]
    log = (site / "logs" / "nightly.log").read_text()
    assert f"previous run of the same inputs: {first}" in log and "Gate passed" in log
    assert not (tmp_path / "mailed").exists()

    # A change of config lands for a night, then is reverted: the night after the revert compares with the last
    # run of its own inputs, not with the reverted change's.
    changed = yaml.safe_load(config.read_text())
    changed["constraints"] = []
    original = config.read_text()
    config.write_text(yaml.safe_dump(changed, sort_keys=False))
    assert _night(site, mail) == 0
    change = _runs(site)[2]
    config.write_text(original)
    assert _night(site, mail) == 0
    log = (site / "logs" / "nightly.log").read_text().split("== ")[-1]
    assert f"previous run of the same inputs: {night}" in log and change.name not in log

    # A night the gate fails: the mail says so, and each failure line names its reference.
    gate = json.loads((site / "ci" / "gate.json").read_text())
    gate["slices"]["overall"]["mrr"] = 1.0
    (site / "ci" / "gate.json").write_text(json.dumps(gate))
    assert _night(site, mail) == 5
    mailed = (tmp_path / "mailed").read_text()
    assert mailed.startswith("mail -s rqsweep nightly: the gate failed (exit 5) search-team@example.com\n")
    assert re.search(r"  overall: MRR 1\.0000 -> 0\.\d{4} \(fell by more than 0 against gate file ci/gate.json\)\n",
                     mailed)
