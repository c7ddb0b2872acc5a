"""Where the slots live and how copies into them are ordered: the CPU and CUDA devices.

Both run every slot fill on one copy thread (FIFO, so fills happen in submission order,
which AllGather relies on: every rank submits the same blocks in the same order).
  CPU   the "device" is the process's working memory; a fill is a memcpy on the copy
        thread and readiness is a threading event.
  CUDA  slots are device memory; a fill is enqueued on a copy stream after the slot's
        "free" event (recorded when the block that used it finished), and readiness is
        a CUDA event the compute stream waits on (the host never blocks on the copy).
torch.cuda is touched only by CudaDevice, so this module imports on CPU-only builds.
"""
from __future__ import annotations

import atexit
import queue
import threading
import time
import weakref
from typing import Any, Callable

import torch


class Ready:
    """Completion of one submitted fill: wait() returns its result or raises its error."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self.copy_s = 0.0  # time the copy thread spent on it

    def set(self, result: Any = None, error: BaseException | None = None) -> None:
        self._result, self._error = result, error
        self._done.set()

    def wait(self) -> Any:
        self._done.wait()
        if self._error is not None:
            raise RuntimeError(f"offload: a block copy failed: {self._error}") from self._error
        return self._result


class CopyThread:
    """One daemon thread running submitted functions in order. Stopped at interpreter exit
    when still running: a daemon thread caught inside a torch copy by finalization aborts
    the process (a model whose offload was never disabled primes its first block at load)."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        _RUNNING.add(self)

    def submit(self, fn: Callable[[], Any]) -> Ready:
        ready = Ready()
        self._queue.put((fn, ready))
        return ready

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, ready = item
            t0 = time.perf_counter()
            try:
                result = fn()
            except BaseException as e:  # handed to the waiter
                ready.copy_s = time.perf_counter() - t0
                ready.set(error=e)
                continue
            ready.copy_s = time.perf_counter() - t0
            ready.set(result)

    def drain(self) -> None:
        """Returns once everything submitted so far has run."""
        self.submit(lambda: None).wait()

    def stop(self) -> None:
        _RUNNING.discard(self)
        self._queue.put(None)
        self._thread.join(timeout=30)


_RUNNING: "weakref.WeakSet[CopyThread]" = weakref.WeakSet()


@atexit.register
def _stop_running() -> None:
    for thread in list(_RUNNING):
        thread.stop()


class CpuDevice:
    """Slots in working memory; the copy thread is the copy stream."""

    is_host = True

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self._thread = CopyThread("dlo-copy")

    def alloc(self, nbytes: int) -> torch.Tensor:  # [nbytes] uint8
        return torch.empty(nbytes, dtype=torch.uint8)

    def host_buffer(self, nbytes: int) -> torch.Tensor:  # [nbytes] uint8 host memory for packed blocks
        return torch.empty(nbytes, dtype=torch.uint8)

    def submit(self, slot_index: int, fill: Callable[[], None]) -> Ready:
        return self._thread.submit(fill)

    def wait(self, ready: Ready) -> None:
        ready.wait()

    def mark_free(self, slot_index: int) -> None:
        """The block computing from this slot is done (on CPU it is, when the hook returns)."""

    def staging(self, slot_index: int, nbytes: int) -> torch.Tensor:
        raise AssertionError("a host device needs no staging")

    def synchronize(self) -> None:
        self._thread.drain()

    def close(self) -> None:
        self._thread.stop()


class CudaDevice:
    """Slots in GPU memory, filled on a copy stream from pinned host memory."""

    is_host = False

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._thread = CopyThread("dlo-copy-cuda")
        self._stream = torch.cuda.Stream(self.device)
        self._free = [torch.cuda.Event(), torch.cuda.Event()]       # slot i may be overwritten
        self._staged = [torch.cuda.Event(), torch.cuda.Event()]     # staging i may be repacked
        self._staging: list[torch.Tensor | None] = [None, None]

    def alloc(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, device=self.device)

    def host_buffer(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def staging(self, slot_index: int, nbytes: int) -> torch.Tensor:
        """A pinned host buffer for packing pageable (mmap) sources; waits for its last H2D."""
        buf = self._staging[slot_index]
        if buf is None or buf.numel() < nbytes:
            buf = self._staging[slot_index] = self.host_buffer(nbytes)
        self._staged[slot_index].synchronize()
        return buf

    def submit(self, slot_index: int, fill: Callable[[], None]) -> Ready:
        def run() -> torch.cuda.Event:
            with torch.cuda.stream(self._stream):
                self._stream.wait_event(self._free[slot_index])
                fill()
                done = torch.cuda.Event()
                done.record(self._stream)
                self._staged[slot_index].record(self._stream)
            return done
        return self._thread.submit(run)

    def wait(self, ready: Ready) -> None:
        torch.cuda.current_stream(self.device).wait_event(ready.wait())

    def mark_free(self, slot_index: int) -> None:
        self._free[slot_index].record(torch.cuda.current_stream(self.device))

    def synchronize(self) -> None:
        self._thread.drain()
        self._stream.synchronize()
        torch.cuda.current_stream(self.device).synchronize()

    def close(self) -> None:
        self._thread.stop()


def make_device(device: torch.device | str | None):
    device = torch.device(device or "cpu")
    return CudaDevice(device) if device.type == "cuda" else CpuDevice()
