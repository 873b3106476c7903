"""The layer-wise schedule of LSP-Offload: per trainable layer four tasks —

* ``d2h``: copy the compressed gradient (d×d) to a host buffer (pinned, on its own CUDA stream after an event);
* ``process``: CPU Adam on the host (fp32 d×d moments) producing the direction Δ;
* ``h2d``: copy Δ to the device (own stream, event);
* ``update``: W ← W − η P Δ Qᵀ on the compute stream after the h2d event.

``d2h`` is hooked into the layer's backward (the moment its compressed gradient exists), ``process`` and ``h2d``
run on a host worker thread while the backward of shallower layers continues, and ``update`` lands either
opportunistically during the rest of the backward (when the worker is done) or, at the latest, at the start of the
layer's forward in the next iteration (its ``before_forward`` callback). Every update is applied before the layer's
next forward: no stale weights (unlike ZeRO-Offload's one-step delayed update).

Host cost per layer and step (counted by :mod:`offload_trainer.dispatch`): on a CPU-only run no torch operator at all
beyond the layer's own products — the gradient is handed over without a copy, the finiteness check runs inside the C
Adam kernel, Δᵀ is a view made once and the update's in×d buffer is shared by the layers of one shape.

Without CUDA the same tasks run with a CPU worker thread standing for the host side and plain copies standing
for the transfers, so every path of the schedule is exercised on a CPU-only machine. ``overlap=False`` is the
synchronous reference: all four tasks of all layers after the backward, one layer at a time.
"""
from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from .cpu_adam import CPUAdam
from .errors import NonFiniteGradientError

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass
class LayerState:
    """Host-side state of one LSP layer."""

    m: "torch.Tensor"
    """Adam first moment (d×d fp32, host, pinned with CUDA)."""
    v: "torch.Tensor"
    """Adam second moment."""
    host_g: "torch.Tensor"
    """Host buffer the compressed gradient is copied into (d2h); on a CPU-only run the gradient itself (no copy)."""
    host_delta: "torch.Tensor"
    """Host buffer of the Adam direction Δ."""
    dev_delta: "torch.Tensor"
    """Device buffer Δ is uploaded into (h2d); the host buffer itself on a CPU-only run."""
    delta_t: Any = None
    """Δᵀ: a view of ``dev_delta`` made once, so the update transposes nothing per step."""
    step: int = 0
    """Adam steps taken by this layer."""
    pending: Optional[Future] = None
    """The in-flight process+h2d job (overlapped schedule)."""
    up_event: Any = None
    """CUDA event recorded after the h2d copy."""
    g_ref: Any = None
    """Keeps the device gradient alive until its d2h copy completed."""
    events: list = field(default_factory=list)
    """Trace of (task, layer index) for tests."""


class LayerwiseScheduler:
    """Drives the CPU updates of a list of LSP layers (in forward order)."""

    def __init__(self, layers: list, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 overlap: bool = True, threads: int = 0, trace: bool = False):
        import torch

        self.layers = list(layers)
        self.lr = float(lr)
        self.overlap = bool(overlap)
        self.adam = CPUAdam(betas, eps, threads)
        dev = self.layers[0].weight.device
        self.cuda = dev.type == "cuda"
        pin = self.cuda
        self.states: list[LayerState] = []
        for lay in self.layers:
            d = lay.d

            def hbuf() -> "torch.Tensor":
                return torch.zeros(d, d, dtype=torch.float32, pin_memory=pin)

            hd = hbuf()
            dd = torch.zeros(d, d, device=dev) if self.cuda else hd
            self.states.append(LayerState(m=hbuf(), v=hbuf(), host_g=hbuf(), host_delta=hd, dev_delta=dd,
                                          delta_t=dd.t()))
        self.index = {id(lay): i for i, lay in enumerate(self.layers)}
        self._submit = True
        self._sync_queue: list[int] = []
        self._inflight: dict[int, None] = {}  # layers with a submitted host job, in submission order
        self._scratch: dict = {}  # in×d buffers of the updates, one per shape (updates run one at a time)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="lsp_host")
        self._lock = threading.Lock()
        self._error: Optional[NonFiniteGradientError] = None
        self.trace: Optional[list[tuple[str, int]]] = [] if trace else None
        if self.cuda:
            self.d2h_stream = torch.cuda.Stream(device=dev)
            self.h2d_stream = torch.cuda.Stream(device=dev)
        for lay in self.layers:
            lay.on_grad = self._on_grad
            lay.before_forward = self._before_forward

    # --- public ---------------------------------------------------------------------------------------------------
    def begin_step(self, final_micro_batch: bool = True) -> None:
        """Before a micro-batch's backward: only the last micro-batch of a step submits the accumulated gradient."""
        self._submit = bool(final_micro_batch)

    def end_step(self) -> None:
        """After the last backward of a step. Synchronous mode runs every layer's four tasks here; the overlapped
        mode leaves what is still in flight to the layers' next forwards."""
        if not self.overlap:
            for i in self._sync_queue:
                self._d2h(i)
                self._process(i)
                self._h2d(i)
                self._update(i)
            self._sync_queue.clear()
        else:
            self._drain(block=False)
        self._raise_if_error()

    def flush(self) -> None:
        """Apply every pending update now (before evaluation, a checkpoint, a projector refit, the end)."""
        if not self.overlap:
            self.end_step()
        self._drain(block=True)
        self._raise_if_error()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            for lay in self.layers:
                lay.on_grad = lay.before_forward = None
            self._worker.shutdown(wait=True)
            self.adam.close()

    @contextlib.contextmanager
    def inline_host_jobs(self):
        """While active, each host job (process, h2d) runs on the calling thread when it is submitted: the same
        operators as the overlapped schedule, on the one thread ``torch.profiler`` records (it follows only the
        thread that started it), so a profile counts them. Updates then land during the backward."""
        self._drain(block=True)
        worker, self._worker = self._worker, _InlineExecutor()
        try:
            yield self
        finally:
            self._worker = worker

    def state_dict(self) -> dict:
        self.flush()
        return {"layers": [{"m": s.m.clone(), "v": s.v.clone(), "step": s.step} for s in self.states]}

    def load_state_dict(self, sd: dict) -> None:
        for s, x in zip(self.states, sd["layers"]):
            s.m.copy_(x["m"])
            s.v.copy_(x["v"])
            s.step = int(x["step"])

    # --- hooks ----------------------------------------------------------------------------------------------------
    def _on_grad(self, layer) -> None:
        if not self._submit:
            return  # accumulate until the last micro-batch
        i = self.index[id(layer)]
        if not self.overlap:
            self._sync_queue.append(i)
            return
        self._d2h(i)
        self.states[i].pending = self._worker.submit(self._host_job, i)
        self._inflight[i] = None
        self._drain(block=False)  # updates of deeper layers that are ready land while the backward continues

    def _before_forward(self, layer) -> None:
        self._apply_if_pending(self.index[id(layer)], block=True)
        self._raise_if_error()

    # --- tasks ----------------------------------------------------------------------------------------------------
    def _log(self, task: str, i: int) -> None:
        if self.trace is not None:
            with self._lock:
                self.trace.append((task, i))

    def _d2h(self, i: int) -> None:
        import torch

        lay, st = self.layers[i], self.states[i]
        g = lay.take_grad()
        self._log("d2h", i)
        if not self.cuda:
            st.host_g = g  # already on the host: the gradient itself, no copy
        else:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(g.device))
            with torch.cuda.stream(self.d2h_stream):
                self.d2h_stream.wait_event(ev)
                st.host_g.copy_(g, non_blocking=True)
                done = torch.cuda.Event()
                done.record(self.d2h_stream)
            st.g_ref = (g, done)

    def _process(self, i: int) -> None:
        st = self.states[i]
        if self.cuda and st.g_ref is not None:
            st.g_ref[1].synchronize()
            st.g_ref = None
        self._log("process", i)
        # the finiteness check runs inside the C kernel (no torch operator); a bad gradient changes no state
        if not self.adam.delta(st.host_g, st.m, st.v, st.host_delta, st.step + 1, check_finite=True):
            err = NonFiniteGradientError(self.layers[i].name, "compressed gradient holds NaN/inf; update skipped")
            with self._lock:
                self._error = self._error or err
            return
        st.step += 1

    def _h2d(self, i: int) -> None:
        import torch

        st = self.states[i]
        self._log("h2d", i)
        if self.cuda:
            with torch.cuda.stream(self.h2d_stream):
                st.dev_delta.copy_(st.host_delta, non_blocking=True)
                st.up_event = torch.cuda.Event()
                st.up_event.record(self.h2d_stream)

    def _update(self, i: int) -> None:
        import torch

        st = self.states[i]
        if self._error is not None:
            return  # never apply anything once a gradient went bad
        if self.cuda and st.up_event is not None:
            torch.cuda.current_stream(st.dev_delta.device).wait_event(st.up_event)
            st.up_event = None
        self._log("update", i)
        self.layers[i].apply_update(st.dev_delta, self.lr, delta_t=st.delta_t, scratch=self._scratch)

    def _host_job(self, i: int) -> None:
        self._process(i)
        self._h2d(i)

    def _apply_if_pending(self, i: int, block: bool) -> bool:
        st = self.states[i]
        fut = st.pending
        if fut is None or (not block and not fut.done()):
            return False
        st.pending = None
        self._inflight.pop(i, None)
        fut.result()  # re-raise a worker exception here
        self._update(i)
        return True

    def _drain(self, block: bool) -> None:
        # in submission order (the backward's: deepest first); one FIFO worker, so the first job not done yet
        # means none after it is done either
        for i in list(self._inflight):
            if not self._apply_if_pending(i, block) and not block:
                break

    def _raise_if_error(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            # let in-flight jobs finish so nothing touches the weights after we return
            for st in self.states:
                if st.pending is not None:
                    st.pending.exception()
                    st.pending = None
            self._inflight.clear()
            # in-flight jobs of the same failed step may have recorded more errors meanwhile: the first one stands,
            # and a later flush/close must not raise a stale one again
            self._error = None
            raise err


class _InlineExecutor:
    """``submit`` runs the job at once on the calling thread and returns its finished future."""

    def submit(self, fn, *args) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the caller through the future, like a pool's
            fut.set_exception(e)
        return fut

    def shutdown(self, wait: bool = True) -> None:  # noqa: ARG002
        pass
