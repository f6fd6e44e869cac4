"""Stop signals held while a block runs, then ending the process as they would have.

A scheduler asks a job to stop with SIGTERM (SLURM's scancel, time limit and
preemption; torchrun passing on its own; Kubernetes deleting a pod, to its main process) and kills it with
SIGKILL a grace period later; a terminal asks with SIGINT (Ctrl-C), and with SIGHUP as it
closes (an SSH session dropped under a run started without nohup or tmux). SIGQUIT
(Ctrl-\\) is left alone: it asks to end at once, with a core dump. Inside `Held`, such
a signal only notes itself (`received`), so the holder can finish what must not be cut
(a training step, then its checkpoint) and then `end` with it: the signal's earlier
disposition is restored and the signal raised again, so the process ends as it would
have (SIG_DFL: killed by the signal; Python's SIGINT handler: KeyboardInterrupt, and a
Python that does not catch it exits by SIGINT). Whatever waits on the process (torchrun,
Snakemake, the failure records of core.failures) sees a death by signal, retried, as
before. A signal the holder has not ended with by the end of the block is raised then,
unless an exception is leaving the block: that one goes on (the signal stays in
`received`), since it ends the process as well and says more (an out-of-memory error
tells the retry its micro-batch, an input error is recorded); raising the signal
instead would replace it.

The first signal is noted at once on stderr, with the holder's message: what it is
finishing can take minutes (a first step under torch.compile, a whole evaluation), and
a second signal changes nothing (SIGKILL still ends the process at once).

Only a signal whose disposition is the default one is held (SIG_DFL, or Python's
KeyboardInterrupt for SIGINT): one that is ignored (SIGINT in a command a
non-interactive shell started in the background) or has a handler of the caller's is
left as it is. Handlers belong to the main thread: in another thread nothing is held.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Held:
    """`with Held() as held:` SIGTERM, SIGINT and SIGHUP (STOP_SIGNALS) noted in `held.received` (the first one;
    a second is noted nowhere: whatever the holder is finishing goes on), until `end`.
    `pass_to(send)`: the first one is also given to `send` (a child's send_signal).
    `message` (a str, or a function called when the signal comes): written to stderr
    on the first one, after the signal's name."""

    def __init__(self, message: str | Callable[[], str] | None = None):
        self.received: int | None = None
        self._message = message
        self._previous: dict[int, object] = {}
        self._send: Callable[[int], None] | None = None
        self._passed = False

    def __enter__(self) -> Held:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                previous = signal.getsignal(signum)
                if previous in (signal.SIG_DFL, signal.default_int_handler):
                    self._previous[signum] = previous
                    signal.signal(signum, self._note)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        received = self.received
        self._restore()
        if received is not None and exc_type is None:
            self.end(received)

    def _note(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signum
            self._say(signum)
            self._pass()

    def _say(self, signum: int) -> None:
        if self._message is None:
            return
        text = self._message() if callable(self._message) else self._message
        # os.write, not logging or sys.stderr: the handler runs in the main thread, which
        # may be inside a write to stderr, and a buffered stream re-entered raises
        # RuntimeError (reentrant call) out of the handler into the step.
        with contextlib.suppress(OSError):  # a closed stderr must not cost the checkpoint
            os.write(2, f"{signal.Signals(signum).name}: {text}\n".encode())

    def _pass(self) -> None:
        if self._send is not None and self.received is not None and not self._passed:
            self._passed = True
            self._send(self.received)

    def pass_to(self, send: Callable[[int], None]) -> None:
        self._send = send
        self._pass()  # a signal that came before there was anyone to give it to

    def _restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def end(self, signum: int) -> None:
        """End as `signum` ends this process: its earlier disposition restored, raised
        again. Returns only where that disposition does not end the process: a signal
        held by another process (a rank) and ignored in this one, or handled by a
        handler of the caller's that returns."""
        self.received = None
        self._restore()
        signal.raise_signal(signum)
