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
    shared: SharedBuffers | None = None
    group: EnvGroup | None = None
    publisher: InfoPublisher | None = None
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
        layout, segment, mode, row0, restart, fresh = pickle.loads(message[1:])
        layout: BufferLayout
        if segment is not None:
            shared = SharedBuffers.attach(layout, segment)
            arrays = shared.arrays
            current = arrays["current"]
        else:
            arrays = layout.local()
            current = None
        group = EnvGroup(envs, first, row0, mode, env.observation_space, env.action_space,
                         arrays, current, slot, factories if restart else None)
        share = slice(row0, row0 + len(envs))  # this worker's rows of the buffers
        outputs = _piped_outputs(arrays, layout.objects if shared is not None else list(arrays),
                                 share)
        # a worker started again in place of a lost one: its envs are new and start under the
        # autoreset rule (see fleet.py); reset now (SAME_STEP), their rows go to the parent
        count = len(envs)
        try:
            given = group.start_fresh() if fresh else []
        except EnvFailure as failure:
            conn.send_bytes(ERROR + pickle.dumps(failure.as_tuple()))
            return
        conn.send_bytes(_info_reply(_batched(given, count, first), None, outputs, given, first)
                        if fresh and group.rule == RESET_NOW else OK)
        counter = arrays["sync"] if shared is not None else None
        finished = arrays["finished"] if shared is not None else None
        publisher = InfoPublisher(count, arrays["infostate"], arrays["infonames"], slot) \
            if shared is not None else None
        queue: collections.deque[int] = collections.deque()  # async: envs to step, in order
        waiter = CommandWaiter(conn, int(spin_us * 1000) if counter is not None else 0)
        while True:
            if queue and not conn.poll():
                # async: step the oldest queued env and report it at once, so that the parent
                # can hand it out without waiting for this worker's other envs
                env_id = queue.popleft()
                try:
                    info, final = group.step_one(env_id - first)
                    values = None if outputs is None else {
                        k: v[env_id - first] for k, v in outputs.items()}
                    if info or final or values:
                        try:
                            report = DONE_INFO + pickle.dumps(
                                (env_id, info, final, values), protocol=pickle.HIGHEST_PROTOCOL)
                        except Exception as error:
                            raise EnvFailure(env_id, "step", TypeError(
                                f"its info could not be sent to the parent: {error}")) from error
                    else:
                        report = DONE + env_id.to_bytes(8, "little", signed=True)
                except EnvFailure as failure:
                    report = ERROR + pickle.dumps(failure.as_tuple())
                conn.send_bytes(report)
                continue
            message = waiter.wait()
            command = message[:1]
            if command == SEND:
                queue.extend(np.frombuffer(message, dtype="<i8", offset=1).tolist())
                continue
            if command == SEND_VALUES:
                ids, values = pickle.loads(message[1:])
                for name, column in values.items():
                    for e, value in zip(ids, column, strict=True):
                        arrays[name][e - first + row0] = value
                queue.extend(ids)
                continue
            if command == SYNC:
                queue.clear()
                conn.send_bytes(SYNCED + message[1:])
                continue
            reply = OK
            try:
                if command == STEP:
                    if len(message) > 1:  # actions that come through the pipe (all of them
                        for name, value in pickle.loads(message[1:]).items():  # with the pipe
                            arrays[name][share] = value  # transport; object leaves)
                    infos, finals = group.step()
                elif command == RESET:
                    mask, seeds, options = pickle.loads(message[1:])
                    infos, finals = group.reset(mask, seeds, options), []
                elif command == CALL:
                    local, name, args, kwargs = cloudpickle.loads(message[1:])
                    results = group.call(local, name, args, kwargs)
                    try:
                        reply = RESULT + pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)
                    except Exception as error:
                        raise EnvFailure(first, "call", TypeError(
                            f"the result of {name!r} could not be sent to the parent: "
                            f"{error}")) from error
                    infos = finals = []
                elif command == SET_ATTR:
                    local, name, values = cloudpickle.loads(message[1:])
                    group.set_attr(local, name, values)
                    infos = finals = []
                elif command == CLOSE:
                    return
                else:
                    raise RuntimeError(f"unknown command {command!r}")
                if command == STEP and publisher is not None and infos \
                        and publisher.fill(infos):  # (the infos are in the segment)
                    if finals or outputs is not None:
                        reply = _info_reply(None, _batched(finals, count, first), outputs,
                                            finals, first)
                elif command in (STEP, RESET):
                    tree = _batched(infos, count, first)
                    if publisher is not None:
                        if command == STEP and publisher.publish(tree):
                            tree = None  # (in shared memory)
                        elif command == RESET:
                            publisher.clear()
                    if tree is not None or finals or outputs is not None:
                        reply = _info_reply(tree, _batched(finals, count, first), outputs,
                                            infos + finals, first)
            except EnvFailure as failure:
                reply = ERROR + pickle.dumps(failure.as_tuple())
            if counter is None or command in (CALL, SET_ATTR):  # (one reply each, no batch)
                conn.send_bytes(reply)
                continue
            # shared memory: a message only when there is something to say; the last worker
            # to finish wakes the parent (one wake-up per batch, however many workers)
            if reply != OK:
                conn.send_bytes(reply)
            with lock:
                counter[0] += 1
                # (a restart must not count this worker out twice; the parent reads the pipes
                # of the workers that sent something)
                finished[slot] = FINISHED if reply == OK else FINISHED_SENT
                last = counter[0] == counter[1]
                batch = int(counter[2])
            if last:
                done.send_bytes(batch.to_bytes(8, "little"))
            waiter.idle()
    except (EOFError, OSError, KeyboardInterrupt):
        pass  # the parent is gone or closed the pipe
    finally:
        if group is not None:
            group.close()
        else:
            for env in envs:
                with contextlib.suppress(Exception):
                    env.close()
        if shared is not None:
            if publisher is not None:
                publisher.close()
            del group, arrays, current, publisher
            shared.close()
