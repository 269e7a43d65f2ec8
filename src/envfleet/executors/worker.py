"""The worker process of the ``pool`` and ``subprocess`` executors.

A worker builds its share of the envs from cloudpickled factories, reports their spaces, maps
the batch buffers (shared memory) or keeps its own (pipe transport), then serves commands.

Protocol (``Connection.send_bytes`` on the worker's own pipe):

- start-up: worker -> ``b"o" + cloudpickle((observation_space, action_space, metadata,
  render_mode, [(observation_space, action_space) of each env]))``; parent -> ``b"L" +
  pickle((layout, segment name or None, mode, row0, restart_failed, fresh))``; worker ->
  ``b"k"`` (or, when its envs were reset, the result). ``fresh`` is False at start-up; a worker
  started in place of a lost one during a step gets True: its envs start under the autoreset
  rule (``EnvGroup.start_fresh``: NEXT_STEP resets each env on its next step, SAME_STEP at
  once).
- commands: ``b"s"`` step (shared memory: the actions are in the buffers; pipe transport:
  ``b"s" + pickle(action arrays)``); ``b"r" + pickle((mask, seeds, options))`` reset;
  ``b"c"`` close; ``b"m" + cloudpickle((rows, name, args, kwargs))`` call (or get) an
  attribute of the envs at these local rows, answered ``b"R" + pickle(results)``; ``b"t" +
  cloudpickle((rows, name, values))`` set one, answered ``b"k"`` (both always on the worker's
  own pipe); ``b"y" + token`` (after the parent was interrupted mid-call): drop the envs
  queued by async sends and answer ``b"Y" + token``, so the parent knows every earlier answer
  has arrived and can drop them.
- results: ``b"k"`` nothing to report; ``b"i" + pickle((infos, final infos, output arrays or
  None))``, the infos of the worker's share batched in one tree each (``executors.infos``);
  ``b"e" + pickle((env index, phase, error type, message, traceback text))``.
  Pipe transport: one result per command. Shared memory: a result goes through the pipe only
  when it is not ``b"k"``; then the worker counts itself finished in the shared ``sync``
  counter (under a lock; its ``finished`` flag says whether it sent a result, so the parent
  reads only those pipes) and the last one to finish writes the batch's number (``sync[2]``,
  8 bytes) to the parent's one ``done`` pipe (a number, so that a late wake-up from an
  earlier batch is never taken for this one's). A batch without infos costs one byte to each
  worker and one 8-byte message back, and wakes the parent once: nothing is pickled on that
  path.

A worker exits when the parent's end of its pipe closes (the parent died), when a watchdog
thread sees the parent process gone (an env stuck in a long call), or on ``b"c"``.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np

from envfleet.executors.group import RESET_NOW, EnvFailure, EnvGroup
from envfleet.executors.infos import (
    batch,
    copy_tree,
    shared_infos,
    shared_tree,
    signature,
)
from envfleet.executors.shared_memory import BufferLayout, SharedBuffers

OK = b"k"
#: a shared-memory worker's ``finished`` flag once it has finished its batch: without sending
#: anything, or after sending its result through its pipe
FINISHED, FINISHED_SENT = 1, 2
INFO = b"i"
ERROR = b"e"
HELLO = b"o"
LAYOUT = b"L"
STEP = b"s"
RESET = b"r"
CLOSE = b"c"
SEND = b"a"  # async: step these envs (int64 global ids follow), each reported as it finishes
SEND_VALUES = b"A"  # async, with object-leaf actions: pickled (ids, {leaf: their values})
DONE = b"d"  # async: this env (int64 global id follows) finished its step, no info
DONE_INFO = b"D"  # async: this env finished; pickled (id, info, final info, object-leaf
# values of its row or None) follow
CALL = b"m"  # cloudpickled (rows, name, args, kwargs): call / get an attribute of these envs
SET_ATTR = b"t"  # cloudpickled (rows, name, values): set an attribute of these envs
RESULT = b"R"  # pickled list: the result of CALL, one per env
SYNC = b"y"  # 8-byte token: drop the async queue, echo SYNCED + token (after an interrupted call)
SYNCED = b"Y"
#: the parent's stand-in for the result of a worker lost (and started again) in a batch
LOST = b"X"
#: the exit code of a worker whose start re-imported a main script that builds executors at its
#: top level (no ``if __name__ == "__main__":`` guard): the parent explains it in one error
MAIN_REIMPORTED = 87
OUTPUT_PREFIXES = ("obs", "rewards", "terminated", "truncated", "final_obs")


# --- the protocol's helpers for the parent ---------------------------------------------------

#: the step command as ``Connection.send_bytes`` sends it (a 4-byte length, then the bytes)
STEP_FRAME = len(STEP).to_bytes(4, "big", signed=True) + STEP


def exit_if_reimported() -> None:
    """In a worker starting up whose import of the user's main script built an executor (no
    ``if __name__ == "__main__":`` guard): exit quietly, the parent explains (one error
    instead of one traceback per worker)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        os._exit(MAIN_REIMPORTED)


def read_report(message: bytes) -> tuple[int, Any, Any, Any, tuple | None]:
    """An async report (``DONE``, ``DONE_INFO`` or ``ERROR``) as (env, info, final info,
    object-leaf values, failure tuple or None); info is None for ``DONE``."""
    kind = message[:1]
    if kind == DONE:
        return int.from_bytes(message[1:9], "little", signed=True), None, None, None, None
    if kind == DONE_INFO:
        return (*pickle.loads(message[1:]), None)
    if kind == ERROR:
        failure = pickle.loads(message[1:])
        return failure[0], None, None, None, failure
    raise AssertionError(f"unexpected report {kind!r}")


# --- the worker's side ----------------------------------------------------------------------


def _parent_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _watch_parent(pid: int, period: float = 0.5) -> None:
    while True:
        time.sleep(period)
        if not _parent_alive(pid):
            os._exit(1)


def _piped_outputs(arrays: dict[str, np.ndarray], names: list[str],
                   rows: slice) -> dict[str, np.ndarray] | None:
    """This worker's rows of the output arrays that go to the parent through the pipe (all of
    them with the pipe transport, the object leaves with shared memory), or None."""
    piped = {k: arrays[k][rows] for k in names if k.split(".")[0] in OUTPUT_PREFIXES}
    return piped or None


def _batched(items: list, count: int, first: int) -> dict | list | None:
    """A share's (env index, info) list as the parent merges it: a tree (``infos.batch``), the
    list itself when no tree holds it, None when empty."""
    if not items:
        return None
    tree = batch(items, count, first)
    return items if tree is None else tree


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
        return True
    except Exception:
        return False


class InfoPublisher:
    """Puts a worker's step infos in a shared-memory segment of its own once their layout
    (keys in order, dtypes, shapes: ``infos.signature``) is the same two batches running.

    A segment is made once per stable layout (at most ``MAX_SEGMENTS`` times: the infos of a
    layout that keeps changing then go through the pipe for good); it starts with its layout
    (``infos.write_layout``) and its name goes to ``names[slot]``. Every batch, ``state[slot]``
    says which segment holds this batch's infos (its number, from 1), or 0 (none: no infos, or
    sent through the pipe). The parent attaches by name when it sees a new number and unlinks
    the segments; a worker unlinks its previous segment itself when it makes a new one.
    """

    MAX_SEGMENTS = 4

    def __init__(self, count: int, state: np.ndarray, names: np.ndarray, slot: int) -> None:
        self.count, self.state, self.names, self.slot = count, state, names, slot
        self.last: tuple | None = None  # the previous batch's layout
        self.sig: tuple | None = None  # the segment's layout
        self.shared: SharedBuffers | None = None
        self.tree: dict | None = None  # the segment's arrays, as a tree
        # a flat layout's keys and (values array, kind, type or (dtype, shape)) per leaf, for
        # ``fill``; None when the layout nests dicts
        self.fast: tuple[tuple, list] | None = None
        self.masks: list[np.ndarray] = []
        self.made = 0

    def publish(self, tree: Any) -> bool:
        """Write ``tree`` (this batch's infos: a tree, a list or None) into the segment if it
        fits (True)."""
        sig = signature(tree) if type(tree) is dict else None
        stable, self.last = sig is not None and sig == self.last, sig
        if stable and sig != self.sig and self.made < self.MAX_SEGMENTS:
            self.close(unlink=True)
            self.shared = shared_infos(sig, self.count)
            self.tree = shared_tree(sig, self.shared.arrays)
            self.sig = sig
            self.fast = _flat_leaves(tree, self.tree)
            self.masks = [entry[1] for entry in self.tree.values()]
            self.made += 1
            self.names[self.slot] = 0
            name = self.shared.name.encode()
            self.names[self.slot, :len(name)] = np.frombuffer(name, dtype=np.uint8)
        if sig is None or sig != self.sig:
            self.state[self.slot] = 0
            return False
        copy_tree(tree, self.tree)
        self.state[self.slot] = self.made
        return True

    def fill(self, items: list) -> bool:
        """Write this batch's (env index, info) ``items`` straight into the segment when every
        env gave the segment's flat layout exactly (the same keys in order, each value of the
        type, dtype and shape its leaf holds): the tree ``publish`` would copy, without
        building it (True); else nothing is published and the caller batches them."""
        fast = self.fast
        if fast is None or len(items) != self.count:
            return False
        keys, leaves = fast
        first = items[0][0]
        try:
            for j, (i, info) in enumerate(items):
                if i != first + j or tuple(info) != keys:
                    return False
                for value, (values, kind, sig) in zip(info.values(), leaves, strict=True):
                    if kind == "a":
                        if type(value) is not np.ndarray or value.dtype != sig[0] \
                                or value.shape != sig[1]:
                            return False
                    elif type(value) is not sig:
                        return False
                    values[j] = value
        except Exception:  # (an int beyond int64...: the careful path decides)
            return False
        for mask in self.masks:
            mask[:] = True
        self.last = self.sig
        self.state[self.slot] = self.made
        return True

    def clear(self) -> None:
        """This batch has no infos in the segment."""
        self.state[self.slot] = 0

    def close(self, unlink: bool = False) -> None:
        """Unmap the segment (and remove its name: a new one replaces it)."""
        self.tree = self.fast = None
        self.masks = []
        if self.shared is not None:
            self.shared.close()
            if unlink:
                self.shared.owner = True
                self.shared.unlink()
            self.shared = None


def _flat_leaves(tree: dict, shared: dict) -> tuple[tuple, list] | None:
    """``InfoPublisher.fast`` for a batch's ``tree`` and the segment's ``shared`` tree of the
    same layout: None when a key holds a nested dict."""
    if any(len(entry) == 2 for entry in tree.values()):
        return None
    leaves = []
    for key, (values, _, kind, _) in tree.items():
        sig = (values.dtype, values.shape[1:]) if kind == "a" else values.dtype.type \
            if kind == "s" else type(values[0].item())
        leaves.append((shared[key][0], kind, sig))
    return tuple(tree), leaves


def _info_reply(infos: Any, finals: Any, outputs: dict | None, given: list,
                first: int) -> bytes:
    """The reply carrying this share's infos and final infos (each batched in one tree, see
    ``executors.infos``, or None) and its piped output arrays; an info that cannot be pickled
    is named by its env (``given``: the (env index, info) pairs)."""
    try:
        return INFO + pickle.dumps((infos, finals, outputs),
                                   protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as error:  # an info that cannot be pickled
        index = next((i for i, info in given if not _picklable(info)), first)
        failure = EnvFailure(index, "step", TypeError(
            f"its info could not be sent to the parent: {error}"))
        return ERROR + pickle.dumps(failure.as_tuple())


class CommandWaiter:
    """Waits for the parent's next command on ``conn``.

    A sleeping process takes tens of microseconds to wake (on the VMs measured here), a cost
    paid on every batch when envs are light. So when recent commands came within ``spin_ns``
    of the previous batch's end, the worker first polls its pipe for up to ``spin_ns``, giving
    its CPU away at each turn (``sched_yield``: another runnable process, such as the parent,
    runs first), and only then sleeps. When the parent takes longer between batches (a slow
    policy), the worker sleeps at once and costs nothing.
    """

    def __init__(self, conn: Any, spin_ns: int) -> None:
        self.conn = conn
        self.spin_ns = spin_ns
        self.gap = 0.0  # recent time from a batch's end to the next command (moving average)
        self.idle_since: int | None = None
        self._poller = select.poll()
        self._poller.register(conn.fileno(), select.POLLIN)

    def wait(self) -> bytes:
        if self.spin_ns and self.idle_since is not None and self.gap < self.spin_ns:
            poll, now, end = self._poller.poll, time.perf_counter_ns, self.idle_since + self.spin_ns
            while not poll(0) and now() < end:
                os.sched_yield()
        message = self.conn.recv_bytes()
        if self.idle_since is not None:
            self.gap = 0.75 * self.gap + 0.25 * (time.perf_counter_ns() - self.idle_since)
            self.idle_since = None
        return message

    def idle(self) -> None:
        """A batch has just ended: the parent's next command is expected."""
        self.idle_since = time.perf_counter_ns()


def worker_main(conn: Any, payload: bytes, first: int, slot: int, parent_pid: int,
                core: int | None = None, lock: Any = None, done: Any = None,
                spin_us: float = 0.0) -> None:
    """Run envs ``first ..`` (the factories in ``payload``) for the parent ``parent_pid``,
    on CPU ``core`` only when one is given. Shared-memory workers share ``lock`` (guarding the
    ``sync`` counter: [finished, expected, batch number]) and ``done`` (the parent's wake-up
    pipe), and wait for a batch as ``CommandWaiter`` says (``spin_us``: 0 never spins)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if core is not None:
        with contextlib.suppress(OSError, AttributeError):  # not Linux, or not allowed
            os.sched_setaffinity(0, {core})
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    envs: list[Any] = []
    served: ServedShare | None = None
    try:
        try:
            factories = cloudpickle.loads(payload)
            for k, factory in enumerate(factories):
                try:
                    envs.append(factory())
                except Exception as error:
                    raise EnvFailure(first + k, "make", error) from error
            env = envs[0]  # (the parent checks that every env has the same spaces)
            conn.send_bytes(HELLO + cloudpickle.dumps((
                env.observation_space, env.action_space, dict(getattr(env, "metadata", {})),
                getattr(env, "render_mode", None),
                [(e.observation_space, e.action_space) for e in envs])))
        except EnvFailure as failure:
            conn.send_bytes(ERROR + pickle.dumps(failure.as_tuple()))
            return
        message = conn.recv_bytes()
        if message[:1] != LAYOUT:
            return
        served = ServedShare(conn, envs, factories, first, slot, pickle.loads(message[1:]),
                             lock, done, spin_us)
        envs = []  # (the group closes them now)
        if served.start():
            served.serve()
    except (EOFError, OSError, KeyboardInterrupt):
        pass  # the parent is gone or closed the pipe
    finally:
        if served is not None:
            served.close()
        for env in envs:
            with contextlib.suppress(Exception):
                env.close()


class ServedShare:
    """A worker's share as it serves the parent: its ``EnvGroup`` over the batch buffers,
    and one small function per command (``COMMANDS``)."""

    def __init__(self, conn: Any, envs: list[Any], factories: list[Any], first: int,
                 slot: int, start: tuple, lock: Any, done: Any, spin_us: float) -> None:
        layout, segment, mode, row0, restart, self.fresh = start
        layout: BufferLayout
        self.conn, self.first, self.slot, self.row0 = conn, first, slot, row0
        self.lock, self.done = lock, done
        self.shared = None if segment is None else SharedBuffers.attach(layout, segment)
        arrays = self.arrays = layout.local() if self.shared is None else self.shared.arrays
        env = envs[0]
        self.group = EnvGroup(envs, first, row0, mode, env.observation_space,
                              env.action_space, arrays,
                              None if self.shared is None else arrays["current"], slot,
                              factories if restart else None)
        self.count = len(envs)
        self.rows = slice(row0, row0 + self.count)  # this worker's rows of the buffers
        self.outputs = _piped_outputs(
            arrays, list(arrays) if self.shared is None else layout.objects, self.rows)
        shared = self.shared is not None
        self.counter = arrays["sync"] if shared else None
        self.finished = arrays["finished"] if shared else None
        self.publisher = InfoPublisher(self.count, arrays["infostate"], arrays["infonames"],
                                       slot) if shared else None
        self.queue: collections.deque[int] = collections.deque()  # async: envs to step
        self.waiter = CommandWaiter(conn, int(spin_us * 1000) if shared else 0)

    def start(self) -> bool:
        """Answer the layout: ``b"k"``, or, for a worker started in place of a lost one, the
        reset its envs start with under the autoreset rule (see fleet.py); False if it
        failed (the error sent)."""
        try:
            given = self.group.start_fresh() if self.fresh else []
        except EnvFailure as failure:
            self.conn.send_bytes(ERROR + pickle.dumps(failure.as_tuple()))
            return False
        self.conn.send_bytes(self._info_reply(given, []) if self.fresh
                             and self.group.rule == RESET_NOW else OK)
        return True

    def serve(self) -> None:
        """Serve commands until ``b"c"``: between commands, async envs queued by ``send``
        are stepped one at a time, each reported at once."""
        conn, queue = self.conn, self.queue
        while True:
            if queue and not conn.poll():
                conn.send_bytes(self._step_queued(queue.popleft()))
                continue
            message = self.waiter.wait()
            command = message[:1]
            if command == CLOSE:
                return
            handler = COMMANDS.get(command)
            if handler is None:
                raise RuntimeError(f"unknown command {command!r}")
            try:
                reply = handler(self, message)
            except EnvFailure as failure:
                reply = ERROR + pickle.dumps(failure.as_tuple())
            if command in BATCH_COMMANDS and self.counter is not None:
                self._finish_batch(reply)
            elif reply is not None:
                conn.send_bytes(reply)

    # --- the commands ----------------------------------------------------------------------

    def step(self, message: bytes) -> bytes:
        """Step every env (actions in the buffers, or piped after the command byte)."""
        if len(message) > 1:  # actions that come through the pipe (all of them with the pipe
            for name, value in pickle.loads(message[1:]).items():  # transport; object leaves)
                self.arrays[name][self.rows] = value
        infos, finals = self.group.step()
        publisher = self.publisher
        if publisher is not None and infos and publisher.fill(infos):  # (in the segment)
            if finals or self.outputs is not None:
                return self._info_reply([], finals, tree=None)
            return OK
        tree = _batched(infos, self.count, self.first)
        if publisher is not None and publisher.publish(tree):
            tree = None  # (in shared memory)
        if tree is not None or finals or self.outputs is not None:
            return self._info_reply(infos, finals, tree=tree)
        return OK

    def reset(self, message: bytes) -> bytes:
        """Reset the masked envs with their seeds and options."""
        mask, seeds, options = pickle.loads(message[1:])
        infos = self.group.reset(mask, seeds, options)
        if self.publisher is not None:
            self.publisher.clear()
        if infos or self.outputs is not None:
            return self._info_reply(infos, [])
        return OK

    def call(self, message: bytes) -> bytes:
        """Call (or get) an attribute of the envs at these local rows."""
        local, name, args, kwargs = cloudpickle.loads(message[1:])
        results = self.group.call(local, name, args, kwargs)
        try:
            return RESULT + pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:
            raise EnvFailure(self.first, "call", TypeError(
                f"the result of {name!r} could not be sent to the parent: {error}")) from error

    def set_attr(self, message: bytes) -> bytes:
        """Set an attribute of the envs at these local rows."""
        local, name, values = cloudpickle.loads(message[1:])
        self.group.set_attr(local, name, values)
        return OK

    def send(self, message: bytes) -> None:
        """Async: queue these envs (int64 global ids) to step."""
        self.queue.extend(np.frombuffer(message, dtype="<i8", offset=1).tolist())

    def send_values(self, message: bytes) -> None:
        """Async, with object-leaf actions: store them, queue their envs."""
        ids, values = pickle.loads(message[1:])
        for name, column in values.items():
            for e, value in zip(ids, column, strict=True):
                self.arrays[name][e - self.first + self.row0] = value
        self.queue.extend(ids)

    def sync(self, message: bytes) -> bytes:
        """After the parent was interrupted: drop the async queue, echo the token."""
        self.queue.clear()
        return SYNCED + message[1:]

    # --- helpers --------------------------------------------------------------------------

    def _step_queued(self, env_id: int) -> bytes:
        """Async: step queued env ``env_id`` alone; its report (it has written its row)."""
        local = env_id - self.first
        try:
            info, final = self.group.step_one(local)
            values = None if self.outputs is None else {
                k: v[local] for k, v in self.outputs.items()}
            if not (info or final or values):
                return DONE + env_id.to_bytes(8, "little", signed=True)
            try:
                return DONE_INFO + pickle.dumps((env_id, info, final, values),
                                                protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as error:
                raise EnvFailure(env_id, "step", TypeError(
                    f"its info could not be sent to the parent: {error}")) from error
        except EnvFailure as failure:
            return ERROR + pickle.dumps(failure.as_tuple())

    def _info_reply(self, infos: list, finals: list, tree: Any = ...) -> bytes:
        """``_info_reply`` over this share: ``infos`` batched unless ``tree`` is given."""
        if tree is ...:
            tree = _batched(infos, self.count, self.first)
        return _info_reply(tree, _batched(finals, self.count, self.first), self.outputs,
                           infos + finals, self.first)

    def _finish_batch(self, reply: bytes) -> None:
        """Shared memory: a message only when there is something to say; the last worker to
        finish wakes the parent (one wake-up per batch, however many workers)."""
        if reply != OK:
            self.conn.send_bytes(reply)
        counter = self.counter
        with self.lock:
            counter[0] += 1
            # (a restart must not count this worker out twice; the parent reads the pipes of
            # the workers that sent something)
            self.finished[self.slot] = FINISHED if reply == OK else FINISHED_SENT
            last = counter[0] == counter[1]
            batch = int(counter[2])
        if last:
            self.done.send_bytes(batch.to_bytes(8, "little"))
        self.waiter.idle()

    def close(self) -> None:
        """Close the envs and unmap the shared buffers."""
        self.group.close()
        if self.shared is not None:
            if self.publisher is not None:
                self.publisher.close()
            self.group = self.publisher = self.arrays = self.counter = self.finished = None
            self.shared.close()


#: the worker's command table: command byte -> the function serving it (its reply, or None:
#: nothing to send); ``b"c"`` (close) ends the loop
COMMANDS: dict[bytes, Callable[[ServedShare, bytes], bytes | None]] = {
    STEP: ServedShare.step, RESET: ServedShare.reset, CALL: ServedShare.call,
    SET_ATTR: ServedShare.set_attr, SEND: ServedShare.send,
    SEND_VALUES: ServedShare.send_values, SYNC: ServedShare.sync,
}
#: the commands of a batch: with shared memory, answered through the batch counter
BATCH_COMMANDS = frozenset((STEP, RESET))
