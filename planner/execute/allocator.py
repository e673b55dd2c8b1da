"""One tracked allocator for every tensor a run creates, with three strategies.

* ``naive``  -- never reuse: every request gets fresh memory, frees are only counted.
* ``pool``   -- recycle freed blocks by best fit (the smallest free block that is large enough,
  used whole, as Mini-Caffe's pool); a new block only when none fits.
* ``static`` -- one arena; each buffer at the offset an :class:`planner.arena.ArenaPlan` fixed
  before the run.

Whatever the strategy, the allocator records the exact peak of *live* bytes (bytes requested and
not yet freed: the quantity the planner predicts; ``peak_bytes``, reported as
``tracked_peak_bytes``: the plan's own count) and the strategy's *reserved* bytes (what it holds
from the system: all requests for naive, the pool's blocks, the arena).

:meth:`TrackedAllocator.tracking` also measures the step with a meter outside the plan
(``measured_peak_bytes``, named by ``meter``): on NumPy the peak of ``tracemalloc`` over the block
(NumPy reports its data allocations to it: plan buffers as the allocator holds them, kernel
temporaries, Python objects; only what is allocated above what was traced when the block began),
on CuPy the peak of the used bytes of a private memory pool through which
``cupy.cuda.using_allocator`` routes every device allocation of the block, kernel workspace
included (``device_peak_bytes``, rounded by CuPy to 512-byte units: on CuPy the two are the same
figure).

>>> import numpy as np
>>> from planner.execute.backend import get
>>> a = TrackedAllocator(get("numpy"), "pool")
>>> x = a.alloc(0, 1000); a.free(0); y = a.alloc(1, 800)
>>> a.peak_bytes, a.reserved_bytes
(1000, 1024)
"""

from __future__ import annotations

import contextlib
import threading
import tracemalloc

from hgraph.common.errors import HGraphError
from planner.pool import BestFit

STRATEGIES = ("naive", "pool", "static")

#: How :attr:`TrackedAllocator.meter` names the independent meters.
HOST_METER = "tracemalloc"
DEVICE_METER = "cupy pool used bytes"


class HostPeak:
    """What :func:`host_meter` saw: ``peak_bytes`` (None until the block ends) above what was
    traced at :meth:`restart` (the block's start when never restarted), and ``whole_bytes``:
    the same peak above what was traced when the block began -- what a step holds from before
    its parameters and inputs were built (:meth:`restart` once they are)."""

    peak_bytes: int | None = None
    whole_bytes: int | None = None
    base: int = 0
    held: int = 0

    def restart(self) -> None:
        """Forget the peak so far (building the leaves: their initialisers' temporaries); what
        is traced now is held by the rest of the block (counted in ``whole_bytes`` only)."""
        tracemalloc.reset_peak()
        self.held = max(0, int(tracemalloc.get_traced_memory()[0]) - self.base)


@contextlib.contextmanager
def host_meter():
    """``tracemalloc`` around a block: its peak of traced bytes above what was traced when the
    block began (started here and stopped after when tracing was off; when it was already on, the
    caller's tracing goes on but its peak is reset here).

    >>> import numpy as np
    >>> with host_meter() as m:
    ...     a = np.empty(1 << 20, np.uint8); del a
    >>> m.peak_bytes >= 1 << 20
    True
    """
    out = HostPeak()
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out.base = int(tracemalloc.get_traced_memory()[0])
        yield out
        whole = max(0, int(tracemalloc.get_traced_memory()[1]) - out.base)
        out.whole_bytes = whole
        out.peak_bytes = max(0, whole - out.held)
    finally:
        if started:
            tracemalloc.stop()


#: Bytes of host blocks a NumPy ``pool`` keeps between runs (:meth:`TrackedAllocator.release`):
#: an unmetered run draws its blocks from them, so a training loop's steps reuse memory instead
#: of faulting fresh pages in at every step (a few ms per 10 MB), as CuPy's memory pool does for
#: device memory. Only unmetered runs use them (a meter must see the step's buffers allocated).
HOST_CACHE_BYTES = 1 << 30


class _HostCache:
    """Host blocks by exact size, up to :data:`HOST_CACHE_BYTES`, shared by the process's runs."""

    def __init__(self):
        self.blocks, self.nbytes, self.lock = {}, 0, threading.Lock()

    def take(self, size: int):
        with self.lock:
            got = self.blocks.get(size)
            if not got:
                return None
            self.nbytes -= size
            return got.pop()

    def give(self, blocks) -> None:
        with self.lock:
            for b in blocks:
                if self.nbytes + b.size > HOST_CACHE_BYTES:
                    break
                self.blocks.setdefault(b.size, []).append(b)
                self.nbytes += b.size


HOST_CACHE = _HostCache()


def pool_blocks(events, alignment: int) -> list:
    """Replay a run's requests through the ``pool``'s free list (:class:`BestFit`) before the
    run: ``events`` in order, ``(buffer, nbytes)`` a request, ``(buffer, None)`` a free; the
    block each request gets, numbered in the order the blocks are made (the number of blocks so
    far: a new one), for :meth:`TrackedAllocator.take_block`.

    >>> pool_blocks([(0, 100), (0, None), (1, 60), (2, 200)], 64)
    [0, 0, 1]
    """
    pool, sizes, held, out = BestFit(alignment), [], {}, []
    for buf, nbytes in events:
        if nbytes is None:
            b = held.pop(buf)
            pool.give(sizes[b], b)
            continue
        b = pool.take(nbytes)
        if b is None:
            b = len(sizes)
            sizes.append(pool.block_size(nbytes))
        held[buf] = b
        out.append(b)
    return out


class TrackedAllocator:
    def __init__(self, backend, strategy: str = "pool", arena=None, alignment: int = 256):
        if strategy not in STRATEGIES:
            raise HGraphError(f"unknown allocator {strategy!r}; choose from {', '.join(STRATEGIES)}")
        if strategy == "static" and arena is None:
            raise HGraphError("the static allocator needs an arena plan")
        self.backend, self.xp, self.strategy = backend, backend.xp, strategy
        self.alignment = arena.alignment if arena is not None else alignment
        self.live_bytes = self.peak_bytes = 0
        self.reserved_bytes = 0
        self.allocations = 0
        self.device_peak_bytes = None
        self.host_peak_bytes = None
        self._whole = self._restart = None
        self._live = {}            # buffer id -> (block, nbytes)
        self._graveyard = []       # naive: freed memory, kept so it is never reused
        self._pool = BestFit(self.alignment)               # pool: its free blocks
        self._arena = arena
        self._arena_mem = None
        self._reuse = False        # draw pool blocks from HOST_CACHE (during an unmetered tracking)
        self._cached = False       # give them back at release (a run that drew from it)
        self._blocks = []          # every pool block this allocator holds (for release)
        self._views = None         # (block id, dtype, shape) -> typed view (take, unmetered runs)
        if strategy == "static":
            self.reserved_bytes = int(arena.arena_bytes)   # the arena itself is made at first use

    # ---------------------------------------------------------------- requests
    def alloc(self, buf: int, nbytes: int):
        """A uint8 array of exactly ``nbytes`` for buffer ``buf`` (lazy: called at first write)."""
        nbytes = int(nbytes)
        if buf in self._live:
            raise HGraphError(f"buffer {buf} allocated twice")
        if self.strategy == "static":
            if int(self._arena.sizes[buf]) != nbytes:
                raise HGraphError(f"buffer {buf}: arena planned {int(self._arena.sizes[buf])} bytes, "
                                  f"run asks {nbytes}")
            if self._arena_mem is None:
                self._arena_mem = self.xp.empty(max(int(self._arena.arena_bytes), 1), dtype=self.xp.uint8)
            off = int(self._arena.offsets[buf])
            block = self._arena_mem[off:off + nbytes]
            view = block
        elif self.strategy == "pool":
            block = self._pool.take(nbytes)
            if block is None:
                block = self._new_block(nbytes)
            view = block[:nbytes]
        else:
            block = self.xp.empty(max(nbytes, 1), dtype=self.xp.uint8)
            self.reserved_bytes += nbytes
            view = block[:nbytes]
        self._live[buf] = (block, nbytes)
        self.live_bytes += nbytes
        self.allocations += 1
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
        return view

    def take(self, buf: int, nbytes: int, dtype, shape):
        """:meth:`alloc` of a ``pool``, typed and shaped: ``nbytes`` of ``dtype`` as ``shape``
        (``nbytes`` = the shape's bytes). The same free list, blocks, counts and checks; a row
        step makes ~2,500 requests, where :meth:`alloc`'s general path and the caller's
        ``view``/``reshape`` cost as much as the smallest kernels. An unmetered run keeps the
        typed views it made, by block, and hands the same one out again (the steps of a plan
        ask for the same buffers in the same order)."""
        if self.strategy != "pool":
            return self.alloc(buf, nbytes).view(dtype).reshape(shape)
        live = self._live
        if buf in live:
            raise HGraphError(f"buffer {buf} allocated twice")
        block = self._pool.take(nbytes)
        if block is None:
            block = self._new_block(nbytes)
        return self._hand_out(buf, block, nbytes, dtype, shape)

    def take_block(self, buf: int, nbytes: int, dtype, shape, block_no: int):
        """:meth:`take` with the ``pool``'s choice made beforehand: ``block_no`` is the block
        (by the order the blocks were made) that :class:`BestFit` hands out for this request in
        this run's request sequence, as :func:`pool_blocks` found it replaying the sequence
        before the run; the next number makes a new block. The same blocks, counts and peak as
        :meth:`take`, without the free list's work at every request (a row step's ~2,500). A
        run uses ``take_block`` / :meth:`free_block` or the others, not both."""
        live = self._live
        if buf in live:
            raise HGraphError(f"buffer {buf} allocated twice")
        blocks = self._blocks
        block = self._new_block(nbytes) if block_no == len(blocks) else blocks[block_no]
        return self._hand_out(buf, block, nbytes, dtype, shape)

    def _hand_out(self, buf: int, block, nbytes: int, dtype, shape):
        """Count ``buf`` live in ``block`` and return its typed view: :meth:`take`'s and
        :meth:`take_block`'s common end (an unmetered run reuses the view it made for that
        block, dtype and shape)."""
        self._live[buf] = (block, nbytes)
        n = self.live_bytes = self.live_bytes + nbytes
        self.allocations += 1
        if n > self.peak_bytes:
            self.peak_bytes = n
        views = self._views
        if views is None:
            return block[:nbytes].view(dtype).reshape(shape)
        key = (id(block), dtype, shape)
        arr = views.get(key)
        if arr is None:
            arr = views[key] = block[:nbytes].view(dtype).reshape(shape)
        return arr

    def free_block(self, buf: int) -> None:
        """Free a buffer of :meth:`take_block` (its block is handed out again by number)."""
        self.live_bytes -= self._live.pop(buf)[1]

    def _new_block(self, nbytes: int):
        """A new ``pool`` block for ``nbytes`` (from :data:`HOST_CACHE` in an unmetered run)."""
        size = self._pool.block_size(nbytes)
        block = HOST_CACHE.take(size) if self._reuse else None
        if block is None:
            block = self.xp.empty(size, dtype=self.xp.uint8)
        self._blocks.append(block)
        self.reserved_bytes += block.size
        return block

    def free(self, buf: int) -> None:
        block, nbytes = self._live.pop(buf)
        self.live_bytes -= nbytes
        if self.strategy == "pool":
            self._pool.give(block.size, block)
        elif self.strategy == "naive":
            self._graveyard.append(block)

    def is_live(self, buf: int) -> bool:
        return buf in self._live

    def release(self) -> None:
        """End of the run: the blocks of an unmetered NumPy pool go to :data:`HOST_CACHE` for
        the next run (every array handed out is then invalid); otherwise they are dropped."""
        if self._cached and self.strategy == "pool":
            HOST_CACHE.give(self._blocks)
        self._blocks, self._live, self._pool = [], {}, BestFit(self.alignment)
        self._views = None

    # ---------------------------------------------------------------- device hook
    @property
    def meter(self) -> str:
        """The meter behind :attr:`measured_peak_bytes`."""
        return DEVICE_METER if self.backend.is_gpu else HOST_METER

    @property
    def measured_peak_bytes(self) -> int | None:
        """The independent meter's peak over :meth:`tracking` (None before a tracked block)."""
        got = self.device_peak_bytes if self.backend.is_gpu else self.host_peak_bytes
        return None if got is None else int(got)

    @property
    def measured_step_peak_bytes(self) -> int | None:
        """The independent meter's peak over :meth:`tracking` counted from the block's start,
        so including what was built before :meth:`leaves_built` (a step's parameters and
        inputs): the whole step's peak, compared with
        :func:`planner.whole_step.predict`'s ``step_peak_bytes``."""
        return None if self._whole is None else int(self._whole)

    def leaves_built(self) -> None:
        """Inside :meth:`tracking`: the parameters and inputs are built; the step starts. The
        meter's peak restarts here (``measured_peak_bytes`` counts from now on, above what is
        held now; ``measured_step_peak_bytes`` from the block's start)."""
        if self._restart is not None:
            self._restart()

    @contextlib.contextmanager
    def tracking(self, meter: bool = True):
        """Measure the block with a meter outside the plan: on NumPy ``tracemalloc``
        (:func:`host_meter`); on CuPy every allocation inside goes through a private pool whose
        used-bytes peak is recorded. ``meter=False``: no meter (``measured_peak_bytes`` stays
        None), for timing without tracemalloc's overhead."""
        self._whole = self._restart = None
        if not meter:
            self._reuse = self._cached = not self.backend.is_gpu
            self._views = {}
            try:
                yield self
            finally:
                self._reuse = False
            return
        if not self.backend.is_gpu:
            with host_meter() as m:
                self._restart = m.restart
                yield self
            self._restart = None
            self.host_peak_bytes, self._whole = m.peak_bytes, m.whole_bytes
            return
        cupy = self.xp
        pool = cupy.cuda.MemoryPool()
        self.device_peak_bytes = 0
        # used bytes when the leaves were built, the peak since then, the peak since the start
        held = [0, 0, 0]

        def malloc(nbytes):
            mem = pool.malloc(nbytes)
            used = pool.used_bytes()
            held[1], held[2] = max(held[1], used), max(held[2], used)
            return mem

        def restart():
            held[0] = held[1] = pool.used_bytes()

        self._restart = restart
        with cupy.cuda.using_allocator(malloc):
            yield self
        self.backend.synchronize()
        self._restart = None
        self.device_peak_bytes, self._whole = max(0, held[1] - held[0]), held[2]

    def stats(self) -> dict:
        return {"allocator": self.strategy, "tracked_peak_bytes": int(self.peak_bytes),
                "measured_peak_bytes": self.measured_peak_bytes, "meter": self.meter,
                "reserved_bytes": int(self.reserved_bytes), "allocations": int(self.allocations),
                "alignment": int(self.alignment),
                "device_peak_bytes": None if self.device_peak_bytes is None else int(self.device_peak_bytes)}
