"""Rule-script logging: the first line says how the job ran, the last why it failed."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shardflow.core import runlog
from shardflow.workflow.status import log_error

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def restore_logging(monkeypatch):
    """configure_logging replaces the root handlers and sys.excepthook: put both back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:], root.level = handlers, level
    logging.captureWarnings(False)


SCRIPT = textwrap.dedent("""
    import sys
    from dataclasses import dataclass
    from shardflow.core.runlog import configure_logging

    @dataclass(frozen=True)
    class Params:
        path: str
        token_budget: int

    configure_logging(sys.argv[1], "embed", Params("données.jsonl", 8))
    raise ValueError("données.jsonl:3: bad record\\nwith a second line")
""")


def test_a_script_that_dies_starts_its_log_with_its_params_and_ends_it_on_the_line_status_reads(tmp_path):
    """The real chain, as a rule runs it: an uncaught error ends the log on the line
    `make status` reads back (shardflow.workflow.status), non-ASCII text included."""
    log = tmp_path / "logs" / "embed" / "chunk_0.log"  # its folder not made yet
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(log)], capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    lines = log.read_text(encoding="utf-8").splitlines()
    assert " INFO embed: params=" in lines[0] and '"token_budget": 8' in lines[0] and " software=" in lines[0]
    assert log_error(str(log)) == "ValueError: données.jsonl:3: bad record"
    assert "Traceback" in log.read_text(encoding="utf-8") and "failed: ValueError" in proc.stderr


def test_an_interrupt_is_left_to_the_previous_hook_and_not_logged_as_a_failure(tmp_path, restore_logging):
    seen = []
    sys.excepthook = lambda *exc: seen.append(exc[0])
    log = tmp_path / "job.log"
    runlog.configure_logging(str(log), "embed", {"a": 1})
    sys.excepthook(KeyboardInterrupt, KeyboardInterrupt(), None)
    assert seen == [KeyboardInterrupt] and log_error(str(log)) is None
    sys.excepthook(OSError, OSError("disk gone"), None)
    assert seen == [KeyboardInterrupt] and log_error(str(log)) == "OSError: disk gone"


def test_tokenizer_threads_follow_the_job_and_a_value_already_set_is_kept(monkeypatch):
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    runlog.share_tokenizer_threads()
    assert "RAYON_NUM_THREADS" not in os.environ  # nothing known: the library's own default
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    runlog.share_tokenizer_threads()
    assert os.environ["RAYON_NUM_THREADS"] == "3"
    runlog.share_tokenizer_threads(2)  # set already (by the user, or an earlier call): kept
    assert os.environ["RAYON_NUM_THREADS"] == "3"


def test_a_package_not_installed_is_recorded_as_none():
    versions = runlog.package_versions(("numpy", "shardflow-no-such-package"))
    assert versions["shardflow-no-such-package"] is None and versions["numpy"] and versions["python"]


def test_the_rouge_scorer_and_its_stemmer_are_recorded():
    """ROUGE is rouge-score with its Porter stemmer, which is nltk's (rouge_score.tokenizers):
    a stemmer that stems a word otherwise moves every ROUGE score, as NLTK 3.2.2's did.
    Neither version was recorded, so a summarisation run's provenance could not say which
    scorer made its numbers, and a pin of `rouge-score` stopped the parse as a package
    provenance never records."""
    from importlib import metadata

    versions = runlog.package_versions()
    assert versions["rouge-score"] == metadata.version("rouge-score")
    assert versions["nltk"] == metadata.version("nltk")
    assert runlog.recorded_package("rouge_score") == "rouge-score" and runlog.recorded_package("NLTK") == "nltk"
