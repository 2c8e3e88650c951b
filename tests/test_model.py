"""Streams against a sequential model (hypothesis stateful): per-stream order and cross-stream happens-before."""

import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import ascentrt as art

pytestmark = pytest.mark.cpu_only  # blocked ops are kernels waiting on host gates

STREAMS = 3
EVENTS = 3
BUFFERS = 3


class StreamModel(RuleBasedStateMachine):
    """Random launches, records, waits, blocks and syncs; the runtime must never contradict the model.

    Model: every kernel launch is an op; an op happens after the previous op of its stream and
    after the ops each earlier `wait` on its stream captured (what the event's record followed at
    the time of the wait call: the last op of the recording stream and the waits queued on it
    before the record, which a record follows as any stream operation does). Kernels append their op id to a global order and to the log of
    the buffer they "write".
    """

    def __init__(self):
        super().__init__()
        self.dev = art.set_device(0)
        self.streams = [self.dev.create_stream(priority=i % 8) for i in range(STREAMS)]
        self.events = [self.dev.create_event() for _ in range(EVENTS)]
        self.order = []                                # op ids in the order kernels finished
        self.logs = [[] for _ in range(BUFFERS)]
        self.preds = {}                                # op -> ops it must follow
        self.stream_of = {}                            # op -> stream index
        self.last = [None] * STREAMS                   # last op submitted per stream
        self.waits = [set() for _ in range(STREAMS)]   # captured ops the next op must follow
        self.captured = [None] * EVENTS                # event -> ("recorded", ops it follows)
        self.gates = {}                                # op -> threading.Event of a blocked op
        self.next_op = 0

    # ---- model helpers ---------------------------------------------------------------------

    def _closure(self, ops):
        seen, todo = set(), [o for o in ops if o is not None]
        while todo:
            o = todo.pop()
            if o not in seen:
                seen.add(o)
                todo.extend(self.preds[o])
        return seen

    def _blocked(self, ops) -> bool:
        """Whether finishing `ops` needs a gate that is still closed."""
        return any(o in self.gates and not self.gates[o].is_set() for o in self._closure(ops))

    def _check_done(self, ops) -> None:
        finished = set(self.order)
        missing = self._closure(ops) - finished
        assert not missing, f"ops {sorted(missing)} had to be complete"

    def _new_op(self, s: int) -> int:
        op = self.next_op
        self.next_op += 1
        self.preds[op] = {p for p in ({self.last[s]} | self.waits[s]) if p is not None}
        self.stream_of[op] = s
        self.waits[s] = set()
        self.last[s] = op
        return op

    # ---- rules -----------------------------------------------------------------------------

    @rule(s=st.integers(0, STREAMS - 1), b=st.integers(0, BUFFERS - 1))
    def launch(self, s, b):
        op = self._new_op(s)
        order, log = self.order, self.logs[b]
        art.launch(lambda: (log.append(op), order.append(op)), stream=self.streams[s])

    # A blocked kernel holds a compute unit: keep one unit free, or unrelated streams starve.
    @precondition(lambda self: sum(not g.is_set() for g in self.gates.values())
                  < self.dev.properties.compute_units - 1)
    @rule(s=st.integers(0, STREAMS - 1), b=st.integers(0, BUFFERS - 1))
    def launch_blocked(self, s, b):
        op = self._new_op(s)
        gate = self.gates[op] = threading.Event()
        order, log = self.order, self.logs[b]
        art.launch(lambda: (gate.wait(30), log.append(op), order.append(op)), stream=self.streams[s])

    @precondition(lambda self: any(not g.is_set() for g in self.gates.values()))
    @rule(data=st.data())
    def release(self, data):
        closed = sorted(op for op, g in self.gates.items() if not g.is_set())
        self.gates[data.draw(st.sampled_from(closed))].set()

    @rule(e=st.integers(0, EVENTS - 1), s=st.integers(0, STREAMS - 1))
    def record(self, e, s):
        self.events[e].record(self.streams[s])
        self.captured[e] = ("recorded", {self.last[s]} | self.waits[s])

    @rule(e=st.integers(0, EVENTS - 1), s=st.integers(0, STREAMS - 1))
    def wait(self, e, s):
        if self.captured[e] is None:
            with pytest.raises(art.InvalidArgumentError):
                self.streams[s].wait(self.events[e])
            return
        self.streams[s].wait(self.events[e])
        self.waits[s] |= self.captured[e][1]

    @rule(e=st.integers(0, EVENTS - 1))
    def reset_event(self, e):
        self.events[e].reset()
        self.captured[e] = None

    @rule(s=st.integers(0, STREAMS - 1))
    def synchronize_stream(self, s):
        ops = [self.last[s]] + list(self.waits[s])
        if self._blocked(ops):
            with pytest.raises(art.AscentTimeoutError):
                self.streams[s].synchronize(timeout=0.01)
        else:
            self.streams[s].synchronize(timeout=10)
            self._check_done(ops)

    @rule(e=st.integers(0, EVENTS - 1))
    def synchronize_event(self, e):
        if self.captured[e] is None:
            self.events[e].synchronize(timeout=10)  # never recorded: returns at once
            return
        ops = self.captured[e][1]
        if self._blocked(ops):
            with pytest.raises(art.AscentTimeoutError):
                self.events[e].synchronize(timeout=0.01)
        else:
            self.events[e].synchronize(timeout=10)
            self._check_done(ops)

    @rule(s=st.integers(0, STREAMS - 1))
    def query_stream(self, s):
        ops = [self.last[s]] + list(self.waits[s])
        done = self.streams[s].query()
        if done:
            self._check_done(ops)
        if self._blocked(ops):
            assert not done

    # ---- invariants --------------------------------------------------------------------------

    @invariant()
    def observed_order_respects_happens_before(self):
        order = list(self.order)
        position = {op: i for i, op in enumerate(order)}
        for op, i in position.items():
            for p in self.preds[op]:
                assert p in position and position[p] < i, f"op {op} ran before its predecessor {p}"

    @invariant()
    def buffer_logs_keep_each_streams_order(self):
        for log in self.logs:
            snapshot = list(log)
            for s in range(STREAMS):
                mine = [op for op in snapshot if self.stream_of[op] == s]
                assert mine == sorted(mine)

    def teardown(self):
        for g in self.gates.values():
            g.set()
        for s in self.streams:
            s.synchronize(timeout=30)
        self._check_done(self.last)
        assert sorted(self.order) == list(range(self.next_op))
        for s in self.streams:
            s.destroy()


StreamModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_streams_match_the_sequential_model = StreamModel.TestCase
