"""Run groups: a durable set of runs of one runtime, submitted and observed together.

`WorkflowRuntime.group` names a `RunGroup`. `RunGroup.submit` writes the
group's manifest (its members' keys and inputs, an object beside the memos)
before it submits any member, then submits the members, at most
`MAX_CONCURRENT_SUBMISSIONS` at once. A member's run id is the hex SHA-256
of ``"{group_id}/{key}"`` (`member_run_id`), so groups never share run state
and a second submission finds the same runs.

Each member has a `MemberRecord` in the queue's KV namespace, written
pending with the member's first step and rewritten with the termination by
the settlement that ends its run, whatever the path (a verdict, an error,
a cancel, the reaper). So the group's state is always the manifest plus
those records:

- a second `submit` with the same members, or `resume` from the manifest
  alone, submits again only the members that did not succeed (an active
  member is a duplicate submission, a failed or cancelled one runs again);
  another member list raises `GroupMismatch` and writes nothing;
- `results` streams each member's `MemberResult` as it terminates (already
  terminated ones at once), sleeping on the member records' KV watches;
- `status` counts the members by state, `progress` too (telling running
  and waiting members from pending ones) with a rate and an estimate of the
  time remaining (`durable.engine.progress`), `cancel` cancels the active ones,
  `forget` removes everything the group left in the store.

With ``RuntimeOptions.group_retention``, a `results` consumer that saw the
last termination writes a group marker (an `ExpiryIndex` entry of the
runtime's queue, `keys.group_terminals_prefix`); the maintenance loop of
the runtime on that queue forgets the group one retention window later
(`GroupRetention`), and no other runtime touches it. A group whose results
are never consumed is kept until it is forgotten.

On a partitioned store (`durable.cluster.manifest`) a group may spread its
members: built with ``route`` (a member's run id -> the runtime of the
partition that holds it), each member is submitted, read, watched,
cancelled and forgotten in its own partition (its member record lives
there, beside its run), while the manifest and the group marker stay with
the runtime the group was built on (the group id's partition). Without
``route`` every member is the group runtime's, as on one store. Group
retention sweeps a runtime's own markers with that runtime alone, so it
forgets only groups whose members are all there (the decorators' ``map``
sets no group retention).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from durable._logging import get_logger
from durable.engine import keys
from durable.engine._checks import check_bytes, check_str
from durable.engine.progress import (
    DEFAULT_WINDOW,
    Progress,
    ProgressSnapshot,
    fold_members,
    progress_updates,
)
from durable.engine.records import (
    GroupManifest,
    GroupMembership,
    MemberRecord,
    decode_group_manifest,
    decode_member_record,
    encode_group_manifest,
)
from durable.engine.runs import (
    RunOptions,
    RunOutcome,
    RunSpec,
    RunTermination,
    SubmitOutcome,
    TerminalStatus,
)
from durable.engine.transitions import internal_effects
from durable.errors import (
    DuplicateMemberKey,
    GroupMismatch,
    GroupNotFound,
    InvalidArgument,
    InvalidId,
    MemberNotSubmitted,
    ObjectExists,
    ObjectNotFound,
)
from durable.store.expiry import Delete, ExpiryEntry, ExpiryIndex
from durable.store.ids import validate_id
from durable.store.queue import SettlementEffects

if TYPE_CHECKING:
    from durable.engine.runtime import WorkflowRuntime
    from durable.store.kv import KvNamespace

__all__ = [
    "MAX_CONCURRENT_SUBMISSIONS",
    "GroupMember",
    "GroupRetention",
    "GroupStatus",
    "MemberResult",
    "RunGroup",
    "member_run_id",
]

log = get_logger("durable.engine.groups")

#: Member submissions (and cancellations) a group runs at once.
MAX_CONCURRENT_SUBMISSIONS = 32
#: Members whose KV records `RunGroup.forget` deletes per commit.
_FORGET_BATCH = 128

_T = TypeVar("_T")
_R = TypeVar("_R")


def member_run_id(group_id: str, key: str) -> str:
    """The run id of member ``key`` of group ``group_id``: hex SHA-256 of ``"{group_id}/{key}"``."""
    return hashlib.sha256(f"{group_id}/{key}".encode()).hexdigest()


# ------------------------------------------------------------------ values


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One member of a submission: its ``key`` (unique in the group) and its
    first step's ``input``."""

    key: str
    input: bytes

    def __post_init__(self) -> None:
        check_str("GroupMember.key", self.key, non_empty=True)
        object.__setattr__(self, "input", check_bytes("GroupMember.input", self.input))


@dataclass(frozen=True, slots=True)
class MemberResult:
    """A terminated member: how its run ended and, when the worker that ended
    it recorded one (and it is still stored), its committed outcome."""

    key: str
    run_id: str
    termination: RunTermination
    outcome: RunOutcome | None = None


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """A group's members counted by state; ``pending`` counts every member
    that has not terminated (queued, running, or not submitted yet)."""

    total: int
    pending: int
    succeeded: int
    failed: int
    cancelled: int


# ----------------------------------------------------------------- helpers


async def _bounded(
    items: Sequence[_T], work: Callable[[_T], Awaitable[_R]], limit: int
) -> list[_R]:
    """``work`` over ``items``, at most ``limit`` at once, results in order.

    The first error cancels the rest and propagates as itself (not as an
    exception group)."""
    results: list[_R | None] = [None] * len(items)
    todo = iter(enumerate(items))

    async def worker() -> None:
        for i, item in todo:
            results[i] = await work(item)

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(limit, len(items)))]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return results  # type: ignore[return-value]  # every slot was filled


def _difference(stored: GroupManifest, given: GroupManifest) -> str:
    """What differs between two member lists, for `GroupMismatch`."""
    if len(stored.members) != len(given.members):
        return f"{len(stored.members)} members stored, {len(given.members)} given"
    for i, ((key, input), (other_key, other_input)) in enumerate(
        zip(stored.members, given.members, strict=True)
    ):
        if key != other_key:
            return f"member {i} is {key!r} in the manifest, {other_key!r} here"
        if input != other_input:
            return f"member {key!r} has another input"
    return "no difference"  # unreachable: the lists are equal


# -------------------------------------------------------------------- group


class RunGroup:
    """A durable set of runs of one runtime; see the module docstring.

    Cheap to build (`WorkflowRuntime.group`): every method reads the store.
    """

    __slots__ = ("_manifest_name", "_route", "_rt", "group_id")

    def __init__(
        self,
        runtime: WorkflowRuntime,
        group_id: str,
        route: Callable[[str], WorkflowRuntime] | None = None,
    ) -> None:
        self._rt = runtime
        self._route = route
        #: The group's id (1 to 128 bytes of ``[A-Za-z0-9_-]``).
        self.group_id = validate_id(group_id, "group id")
        self._manifest_name = keys.manifest_object(runtime.memos.prefix, group_id)

    def __repr__(self) -> str:
        return f"RunGroup({self.group_id!r})"

    def run_id(self, key: str) -> str:
        """The run id of member ``key``."""
        return member_run_id(self.group_id, key)

    def runtime_of(self, run_id: str) -> WorkflowRuntime:
        """The runtime that holds member run ``run_id`` (the group's own
        unless the group was built with a ``route``)."""
        return self._rt if self._route is None else self._route(run_id)

    # ------------------------------------------------------------ submit

    async def submit(
        self, members: Iterable[GroupMember], options: RunOptions | None = None
    ) -> list[SubmitOutcome]:
        """Write the manifest, then submit every member that has not succeeded.

        ``options`` apply to every member's steps. Returns one `SubmitOutcome`
        per member in order: ``newly_submitted`` is False for an active
        member (a duplicate) and for one that already succeeded (not run
        again; its ``job_id`` is empty). Raises `DuplicateMemberKey` for a
        key given twice and `GroupMismatch` if the group was submitted with
        other members; neither writes anything.
        """
        given = list(members)
        seen: set[str] = set()
        for member in given:
            if not isinstance(member, GroupMember):
                raise InvalidArgument(f"a group member must be a GroupMember, got {member!r}")
            if member.key in seen:
                raise DuplicateMemberKey(self.group_id, member.key)
            seen.add(member.key)
        manifest = GroupManifest(
            self.group_id, tuple((m.key, m.input) for m in given), self._rt.clock.now_ms()
        )
        return await self._submit_members(await self._store_manifest(manifest), options)

    async def resume(self, options: RunOptions | None = None) -> list[SubmitOutcome]:
        """`submit` from the stored manifest alone (e.g. in a new process after a
        partial failure); `GroupNotFound` if the group has none."""
        return await self._submit_members(await self.manifest(), options)

    async def _store_manifest(self, manifest: GroupManifest) -> GroupManifest:
        """Create the manifest, or check it against the one stored."""
        objects = self._rt.memos.objects
        while True:
            try:
                await objects.create(self._manifest_name, encode_group_manifest(manifest))
                return manifest
            except ObjectExists:
                stored = await self._load_manifest()
            if stored is None:
                continue  # forgotten in between: create it again
            if stored.members != manifest.members:
                raise GroupMismatch(self.group_id, _difference(stored, manifest))
            return stored

    async def _submit_members(
        self, manifest: GroupManifest, options: RunOptions | None
    ) -> list[SubmitOutcome]:
        run_options = options if options is not None else RunOptions()

        async def submit_one(member: tuple[str, bytes]) -> SubmitOutcome:
            key, input = member
            run_id = self.run_id(key)
            record = self.member_record(key)
            if record is not None and _status(record) is TerminalStatus.SUCCEEDED:
                return SubmitOutcome(run_id, "", False)
            spec = RunSpec(input, run_id=run_id, options=run_options)
            runtime = self.runtime_of(run_id)
            return await runtime.submit_member(spec, GroupMembership(self.group_id, key))

        return await _bounded(manifest.members, submit_one, MAX_CONCURRENT_SUBMISSIONS)

    # ------------------------------------------------------------- reading

    async def manifest(self) -> GroupManifest:
        """The stored manifest; `GroupNotFound` if there is none."""
        manifest = await self._load_manifest()
        if manifest is None:
            raise GroupNotFound(self.group_id)
        return manifest

    async def members(self) -> list[GroupMember]:
        """The members as submitted, in order; `GroupNotFound` if never submitted."""
        return [GroupMember(key, input) for key, input in (await self.manifest()).members]

    async def _load_manifest(self) -> GroupManifest | None:
        try:
            data = await self._rt.memos.objects.get(self._manifest_name)
        except ObjectNotFound:
            return None
        return decode_group_manifest(data, f"manifest of run group {self.group_id!r}")

    def member_record(self, key: str) -> MemberRecord | None:
        """The member record of ``key`` (None: never submitted)."""
        kv = self.runtime_of(self.run_id(key)).queue.kv
        raw = kv.get(keys.member_key(self.group_id, key))
        if raw is None:
            return None
        return decode_member_record(raw, f"member record {key!r} of group {self.group_id!r}")

    def _ended(self, key: str) -> RunTermination | None:
        """How member ``key`` ended (None: active); `MemberNotSubmitted` without a
        record (unless this process submitted it and the store does not show
        it yet: `WorkflowRuntime.pending_input`)."""
        record = self.member_record(key)
        if record is None:
            run_id = self.run_id(key)
            if self.runtime_of(run_id).pending_input(run_id) is not None:
                return None
            raise MemberNotSubmitted(self.group_id, key)
        return record.termination

    async def _result(self, key: str, termination: RunTermination) -> MemberResult:
        run_id = self.run_id(key)
        outcome: RunOutcome | None = None
        view = self.runtime_of(run_id).view
        terminal = view.terminal_record(run_id)
        if terminal is not None and terminal.termination == termination:
            # No await since the read: the outcome is checked against this termination.
            outcome = await view.outcome(run_id)
        return MemberResult(key, run_id, termination, outcome)

    async def results(self) -> AsyncIterator[MemberResult]:
        """Each member's `MemberResult` as it terminates, in completion order.

        Members terminated already come first, at once. Sleeps on the member
        records (a KV watch fires with the commit that rewrites one), never
        on the clock. `GroupNotFound` without a manifest; `MemberNotSubmitted`
        for a manifest member with no record (`resume` submits it). Having
        yielded the last member, it writes the group marker when the runtime
        has a group retention.
        """
        manifest = await self.manifest()
        changed: asyncio.Queue[str] = asyncio.Queue()
        watches: dict[str, asyncio.Future[None]] = {}

        def kv_of(key: str) -> KvNamespace:
            return self.runtime_of(self.run_id(key)).queue.kv

        def watch(key: str) -> None:
            fut = kv_of(key).watch(keys.member_key(self.group_id, key))
            fut.add_done_callback(lambda _: changed.put_nowait(key))
            watches[key] = fut

        try:
            ready: list[tuple[str, RunTermination]] = []
            for key, _ in manifest.members:  # read and watch with no await between
                termination = self._ended(key)
                if termination is not None:
                    ready.append((key, termination))
                else:
                    watch(key)
            for runtime, _ in self._by_runtime(key for key, _ in ready):
                await runtime.queue.writer.flush()  # memory may be ahead of the store
            for key, termination in ready:
                yield await self._result(key, termination)
            while watches:
                fired = [await changed.get()]
                while not changed.empty():
                    fired.append(changed.get_nowait())
                ready = []
                for key in fired:
                    fut = watches.pop(key, None)
                    if fut is None:
                        continue
                    fut.result()  # the store's failure, if the commit never landed
                    termination = self._ended(key)
                    if termination is not None:
                        ready.append((key, termination))
                    else:
                        watch(key)  # rewritten but still active (submitted again)
                for key, termination in ready:
                    yield await self._result(key, termination)
            await self._rt.group_markers.mark(self.group_id)
        finally:
            for key, fut in watches.items():
                kv_of(key).unwatch(keys.member_key(self.group_id, key), fut)
                if fut.done() and not fut.cancelled():
                    fut.exception()  # a store failure: raised once above, not per watch

    async def status(self) -> GroupStatus:
        """The members counted by state; `GroupNotFound` without a manifest."""
        manifest = await self.manifest()
        counts = dict.fromkeys(TerminalStatus, 0)
        pending = 0
        for key, _ in manifest.members:
            record = self.member_record(key)
            status = None if record is None else _status(record)
            if status is None:
                pending += 1
            else:
                counts[status] += 1
        return GroupStatus(
            total=len(manifest.members),
            pending=pending,
            succeeded=counts[TerminalStatus.SUCCEEDED],
            failed=counts[TerminalStatus.FAILED],
            cancelled=counts[TerminalStatus.CANCELLED],
        )

    # ------------------------------------------------------------ progress

    async def progress(self, window: float = DEFAULT_WINDOW) -> Progress:
        """The members counted by state (pending, running, waiting and the
        terminations), the completion rate over the last ``window`` seconds
        and the estimated time remaining (`durable.engine.progress`).

        Reads the manifest (one object: the total and the start) and each
        member's records from memory; `GroupNotFound` without a manifest.
        """
        return (await self._progress_snapshot(await self.manifest(), window)).progress

    async def progress_updates(
        self, *, interval: float = 1.0, window: float = DEFAULT_WINDOW
    ) -> AsyncIterator[Progress]:
        """`progress` at once, then after each change (a member's record or
        step pointer rewritten), and at least every ``interval`` seconds of
        the runtime's clock, until every member terminated
        (`durable.engine.progress.progress_updates`). The manifest is read
        once."""
        manifest = await self.manifest()

        async def measure(poll: bool) -> ProgressSnapshot:
            if poll:
                for runtime in {id(r): r for r in self._member_runtimes(manifest)}.values():
                    await runtime.catch_up("")
            return await self._progress_snapshot(manifest, window, watch=True)

        async for p in progress_updates(measure, self._rt.clock, interval=interval):
            yield p

    def _member_runtimes(self, manifest: GroupManifest) -> list[WorkflowRuntime]:
        return [self.runtime_of(self.run_id(key)) for key, _ in manifest.members]

    async def _progress_snapshot(
        self, manifest: GroupManifest, window: float, *, watch: bool = False
    ) -> ProgressSnapshot:
        members = []
        for key, _ in manifest.members:
            runtime = self.runtime_of(self.run_id(key))
            members.append((runtime.queue, key, self.member_record(key)))
        return fold_members(
            members,
            self.group_id,
            self._rt.clock.now_ms(),
            window=window,
            total=len(manifest.members),
            started_ms=manifest.created_at_ms,
            watch=watch,
        )

    # ------------------------------------------------------------ changing

    async def cancel(self) -> int:
        """Cancel every active member (`WorkflowRuntime.cancel`); how many were.

        `GroupNotFound` without a manifest. Members never submitted stay so.
        """
        manifest = await self.manifest()
        active = [key for key, _ in manifest.members if _is_active(self.member_record(key))]

        async def cancel_one(key: str) -> bool:
            run_id = self.run_id(key)
            return await self.runtime_of(run_id).cancel(run_id)

        cancelled = await _bounded(active, cancel_one, MAX_CONCURRENT_SUBMISSIONS)
        return sum(cancelled)

    def _by_runtime(self, members: Iterable[str]) -> list[tuple[WorkflowRuntime, list[str]]]:
        """``members`` (keys) grouped by the runtime that holds them, in order."""
        groups: dict[int, tuple[WorkflowRuntime, list[str]]] = {}
        for key in members:
            runtime = self.runtime_of(self.run_id(key))
            groups.setdefault(id(runtime), (runtime, []))[1].append(key)
        return list(groups.values())

    async def forget(self) -> int:
        """Delete the group: its members' memo entries, terminal records and
        member records, then the manifest; how many members it removed.

        Meant for a group whose members have terminated: an active member
        keeps running (`cancel` it first), and its termination writes its
        member record again. Forgetting a group that is not stored is a no-op.
        """
        manifest = await self._load_manifest()
        members = [] if manifest is None else [key for key, _ in manifest.members]
        listed = set(members)
        prefix = keys.group_prefix(self.group_id)
        async for page in self._rt.queue.kv.entries(prefix):
            for kv_key, _ in page:
                name = kv_key[len(prefix) :].decode()
                if name not in listed:  # submitted by a group whose manifest is gone
                    members.append(name)
                    listed.add(name)

        async def clear(key: str) -> int:
            run_id = self.run_id(key)
            return await self.runtime_of(run_id).memos.clear_run(run_id)

        await _bounded(members, clear, MAX_CONCURRENT_SUBMISSIONS)
        for runtime, held in self._by_runtime(members):
            for start in range(0, len(held), _FORGET_BATCH):
                fx = SettlementEffects()
                for key in held[start : start + _FORGET_BATCH]:
                    fx.kv_delete(keys.member_key(self.group_id, key))
                    fx.kv_delete(keys.outcome_key(self.run_id(key)))
                await runtime.queue.commit_effects(fx)
        await self._rt.memos.objects.delete([self._manifest_name])
        return len(members)


def _status(record: MemberRecord) -> TerminalStatus | None:
    return None if record.termination is None else record.termination.status


# ---------------------------------------------------------------- retention


class GroupRetention:
    """Group markers and their sweep (``RuntimeOptions.group_retention``).

    A marker is written when a `RunGroup.results` consumer saw the last
    termination; `sweep` forgets each group one retention window after its
    marker, unless the group was submitted again since (an active member,
    or a manifest newer than the marker): then the marker alone goes, and
    the next consumer that sees the end writes a new one.
    """

    __slots__ = ("_index", "_legacy", "_rt")

    def __init__(self, runtime: WorkflowRuntime) -> None:
        self._rt = runtime
        kv = runtime.queue.kv
        self._index = ExpiryIndex(kv, keys.group_terminals_prefix(runtime.options.queue_name))
        #: Markers written before they were kept per queue (swept, never written).
        self._legacy = ExpiryIndex(kv, keys.GROUP_TERMINALS_PREFIX)

    async def mark(self, group_id: str, *, internal: Mapping[bytes, bytes] | None = None) -> bool:
        """Write the marker of ``group_id`` now; False (nothing written) without
        a group retention.

        ``internal``: KV writes under the reserved ``workflow/`` prefix,
        committed with the marker (alone without a group retention). Not
        checked: never pass user keys.
        """
        fx = internal_effects(internal)
        if self._rt.options.group_retention is None:
            if not fx.is_empty():
                await self._rt.queue.commit_effects(fx)
            return False
        if fx.is_empty():
            await self._index.add(self._rt.clock.now_ms(), group_id.encode())
        else:
            # The entry's key is built in the commit's synchronous section.
            fx.kv_put(self._index.entry_key(self._rt.clock.now_ms(), group_id.encode()), b"")
            await self._rt.queue.commit_effects(fx)
        return True

    async def sweep(self) -> int:
        """Forget this runtime's groups whose marker is a retention window old;
        how many markers were removed. A no-op without a group retention.

        Markers are kept per queue: another runtime's groups are left to it.
        Markers a store written before that still holds name no queue; they
        are swept as that version did (by any runtime, with its retention)."""
        retention = self._rt.options.group_retention
        if retention is None:
            return 0

        async def expire(entry: ExpiryEntry) -> Delete:
            try:
                group = RunGroup(self._rt, entry.suffix.decode())
            except (UnicodeDecodeError, InvalidId):
                log.warning("malformed group marker deleted", key=entry.key)
                return Delete()
            manifest = await group._load_manifest()
            if manifest is None or manifest.created_at_ms > entry.at_ms:
                return Delete()  # forgotten already, or a later group under this id
            if any(_is_active(group.member_record(key)) for key, _ in manifest.members):
                return Delete()  # submitted again since the marker
            await group.forget()
            return Delete()

        now = self._rt.clock.now_ms()
        removed = await self._index.sweep(now, retention, expire)
        return removed + await self._legacy.sweep(now, retention, expire)


def _is_active(record: MemberRecord | None) -> bool:
    return record is not None and record.termination is None
