"""Stop signals held while a block runs (SIGINT in this process: Python's KeyboardInterrupt
is how it ends one; SIGTERM's death is checked with real processes in tests/unit/train)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from shardflow.core.signals import Held


@pytest.fixture(autouse=True)
def default_dispositions():
    """Python's own, whatever the test runner set; put back after each test."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


def test_a_signal_is_held_until_the_holder_ends_by_it_and_a_second_changes_nothing():
    with Held() as held:
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)  # a second one, while a checkpoint is written
        assert held.received == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            held.end(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored before it was raised
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    # the block ended by the signal: nothing left to raise


def test_a_signal_the_holder_did_not_end_by_is_raised_as_the_block_ends():
    """A signal is never swallowed: a block left by its last step, before the holder
    looked again, ends as the signal would have ended it."""
    with pytest.raises(KeyboardInterrupt):
        with Held():
            signal.raise_signal(signal.SIGINT)
    with Held() as held:  # none received: nothing raised, dispositions back
        pass
    assert held.received is None and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_error_under_way_as_the_block_ends_goes_on_and_the_signal_gives_way():
    """A held signal raised as the block ended replaced the error leaving it: a training
    step out of memory during a SIGTERM died by SIGTERM, so the trainer's out-of-memory
    handler never ran and the retry did not learn the smaller micro-batch (nor was a
    deterministic error recorded). The error ends the process as well, and says why."""
    try:
        with Held() as held:
            signal.raise_signal(signal.SIGINT)
            raise MemoryError("CUDA out of memory")
    except BaseException as exc:  # noqa: BLE001 - which one left the block is the point
        got = exc
    assert type(got) is MemoryError
    assert held.received == signal.SIGINT  # still there for a caller that catches the error
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_closed_terminals_sighup_is_held_and_ends_the_process_as_before_but_sigquit_is_not_held():
    """SIGHUP (an SSH session dropped under a run started without nohup or tmux) killed
    the trainer at once, every step since the last checkpoint lost; and the launcher of
    a torchrun job with it, whose torchrun, in a session of its own, got no SIGHUP and
    died of the launcher's death, its ranks mid-step. It is now held as SIGTERM is, and
    the process still ends by it. SIGQUIT (Ctrl-\\) asks to end at once: left alone."""
    import subprocess
    import sys

    script = (
        "import os, signal, sys\n"
        "from shardflow.core.signals import Held\n"
        "with Held() as held:\n"
        "    os.kill(os.getpid(), signal.SIGHUP)\n"
        "    print(held.received, flush=True)\n"
        "    os.kill(os.getpid(), getattr(signal, sys.argv[1]))\n"
        "    print('not ended', flush=True)\n"
    )
    for second, ends_by in (("SIGTERM", signal.SIGHUP), ("SIGQUIT", signal.SIGQUIT)):
        done = subprocess.run([sys.executable, "-c", script, second], capture_output=True, text=True, timeout=60)
        held_then = done.stdout.splitlines()
        assert held_then[:1] == [str(int(signal.SIGHUP))], done.stderr  # held: the block went on
        # a second stop signal changes nothing, the block ends by the first; SIGQUIT ends it at once
        assert held_then[1:] == (["not ended"] if second == "SIGTERM" else []), done.stderr
        assert done.returncode == -ends_by, done.stderr


def test_an_ignored_signal_or_a_callers_handler_is_left_alone():
    """SIGINT ignored (a command a non-interactive shell started in the background) would
    not have stopped the process: holding it would make it stop."""
    caught = []

    def callers(signum, frame):
        caught.append(signum)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, callers)
    with Held() as held:
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is callers
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)
    assert held.received is None and caught == [signal.SIGTERM]


def test_outside_the_main_thread_nothing_is_held():
    seen = []

    def run():
        with Held():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]


def test_the_first_signal_is_passed_on_once_even_if_it_came_before_anyone_to_pass_it_to():
    passed = []
    with pytest.raises(KeyboardInterrupt):
        with Held() as held:
            signal.raise_signal(signal.SIGINT)  # before the child started
            held.pass_to(passed.append)
            signal.raise_signal(signal.SIGTERM)
            assert passed == [signal.SIGINT]
    assert passed == [signal.SIGINT]


def test_the_first_signal_says_at_once_what_happens_next_and_a_second_says_nothing(capfd):
    """Nothing said a signal had come until the step ended, which can be minutes (the
    first step's torch.compile, an evaluation of the whole validation split). The note
    is made when the signal comes, so it can name what is under way then."""
    under_way = {"step": 1}
    note = Held(lambda: f"finishing step {under_way['step']} and saving its checkpoint")
    with pytest.raises(KeyboardInterrupt):
        with note:
            under_way["step"] = 8
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            assert capfd.readouterr().err == "SIGINT: finishing step 8 and saving its checkpoint\n"
    with pytest.raises(KeyboardInterrupt):
        with Held("passed on"):
            os.kill(os.getpid(), signal.SIGINT)
    assert capfd.readouterr().err == "SIGINT: passed on\n"
