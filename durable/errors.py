"""The one error tree of `durable`.

Every error that `durable` raises on purpose derives from `DurableError`.
Errors are classified by what the caller can do about them: a *transient*
error (``err.transient is True``) may succeed if the same call is retried
later; a *permanent* one will not. Errors that are bad input also subclass
`ValueError`, and "not found" errors also subclass `LookupError`.

```
DurableError
├── StoreError                       the storage layer
│   ├── ObjectStoreError             a backend call failed (transient)
│   │   ├── ObjectNotFound           (also LookupError; permanent)
│   │   ├── ObjectExists             a create-if-absent lost (permanent)
│   │   └── ObjectStoreTimeout       (transient)
│   ├── CorruptObject                checksum, framing or decoding failed
│   ├── CorruptRequest               an inbox request object cannot be decoded
│   ├── UnsupportedFormat            written by a newer format version
│   ├── PartitionMismatch            opened with another partition count than its own
│   ├── MissingGuarantee             backend cannot create-if-absent atomically
│   ├── StoreNotInitialized          a reader found no store at the URL (transient)
│   ├── StoreNotFound                the bucket or container does not exist (also LookupError)
│   ├── InvalidStoreUrl              not a store URL, or an unknown scheme (also ValueError)
│   ├── Fenced                       another writer opened the store
│   │   ├── SelfFenced               the writer stopped itself (it may no longer own the store)
│   │   ├── StaleEpoch               an open at an epoch older than the log's newest refused
│   │   └── LogLocked                a live process holds the segment log's lock file
│   ├── UnsafeFilesystem             the segment log refused a network filesystem
│   ├── StoreClosed                  the store was closed or has failed
│   ├── BlobMissing                  a value's blob object is gone
│   └── ReadOnlyStore                a write through a read-only view
├── QueueError                       the queue and its KV namespace
│   ├── InvalidQueueName, InvalidId, KvValueTooLarge,
│   │   ReservedKey, ConflictingKvEffect, InvalidOption  (also ValueError)
│   ├── DuplicateJobId               (also ValueError)
│   ├── JobNotFound, PayloadMissing  (also LookupError)
│   ├── InvalidState
│   ├── ClaimLost
│   ├── CancelRequested
│   └── CorruptRecord                a stored queue record cannot be decoded
├── EngineError                      the workflow runtime
│   ├── InputMismatch                same run id, other input (also ValueError)
│   ├── DuplicateStart               a start whose dedup key an active run holds
│   ├── ReservedHeader               a header under ``workflow.`` (also ValueError)
│   ├── InvalidArgument              bad option, trigger, outcome (also ValueError)
│   ├── ReservedMemoKey              a run-memo key kept for the runtime (also ValueError)
│   ├── CorruptEngineRecord          a stored engine record cannot be decoded
│   ├── EffectsSealed                staging after the step returned
│   ├── InconsistentRunState         a step job whose run record is gone
│   ├── SignalWaiterExists           a second waiter for a correlation key
│   ├── GroupNotFound                no manifest for a run group (also LookupError)
│   ├── GroupMismatch                a group resubmitted with other members (also ValueError)
│   ├── DuplicateMemberKey           two members of a group share a key (also ValueError)
│   ├── MemberNotSubmitted           a manifest member has no member record
│   ├── JobTypeError                 a job type or registration is unusable (also ValueError)
│   ├── JobFailed                    a typed job ended in an error
│   ├── BulkFailureThreshold         a bulk run's failed items above its threshold
│   ├── InvalidCronExpression        not a five-field cron expression (also ValueError)
│   ├── DuplicateScheduleName        a cron schedule name used twice (also ValueError)
│   ├── InvalidSchedule              a workflow schedule's id, time zone or window is
│   │                                unusable (also ValueError)
│   └── ScheduleNotFound             no workflow schedule of that id (also LookupError)
└── WorkflowError                    the decorators (`@workflow`, `@step`, `Engine`)
    ├── DecoratorError               misuse caught at decoration time (also TypeError)
    ├── ArgumentMismatch             arguments that do not fit a workflow's or job's
    │                                signature (also TypeError)
    ├── NoEngine                     no `Engine` is running in this context
    ├── NotInWorkflow                a workflow-only call outside a workflow
    ├── UnknownWorkflow              a run of a workflow this process does not know
    ├── NonDeterminismError          a replay called another step than the journal
    ├── ClockNotAdvanced             a run waits on a MockClock nothing advances
    │                                (also TimeoutError; tests only)
    ├── StepMaybeExecutedError       an at-most-once step may have run before a crash
    ├── CacheKeyError                a step's cache_key function raised or gave no str
    ├── UnknownExecutor              a step names an executor its engine was not given
    │                                (also LookupError; permanent)
    ├── WorkerLost                   a step body's worker, connection or scheduler was
    │                                lost before it answered (transient)
    ├── RunStalled                   a run's deliveries ended again and again without
    │                                progress (a poison run); the run failed
    ├── RunCancelled                 the run was cancelled
    │   └── RunTimedOut              ... by its workflow-level timeout
    ├── RunNotFound                  no run of that id in the store (also LookupError)
    ├── WrongRunState                a run control refused by the run's state
    │                                (resume of a live run, forget of an active one)
    ├── NotPublished                 a run ended without publishing a key (also LookupError)
    ├── RequestRejected              a run rejected a request (`Request.reject`)
    ├── RequestUnanswered            a run ended without answering a request
    ├── RequestAlreadyAnswered       a request replied to or rejected twice
    ├── StreamClosed                 a write to a closed stream of a run
    ├── WorkflowFailed               the workflow raised (its exception not rebuilt)
    ├── CodecError                   a value cannot be encoded or decoded (also TypeError)
    │   └── TypeMismatch             a value does not fit its annotation or type=
    ├── CodecMismatch                an Engine's codec or keys cannot read the store's
    │                                payloads; it refuses to open
    └── UntrustedPayload             an unsigned or tampered pickle, refused
```

The engine also raises `InvalidId` for a bad run id and `ReservedKey` for
submission effects under its ``workflow/`` KV prefix.
"""

from __future__ import annotations

__all__ = [
    "ArgumentMismatch",
    "BlobMissing",
    "BulkFailureThreshold",
    "CacheKeyError",
    "CancelRequested",
    "ClaimLost",
    "ClockNotAdvanced",
    "CodecError",
    "CodecMismatch",
    "ConflictingKvEffect",
    "CorruptEngineRecord",
    "CorruptObject",
    "CorruptRecord",
    "CorruptRequest",
    "DecoratorError",
    "DuplicateJobId",
    "DuplicateMemberKey",
    "DuplicateScheduleName",
    "DuplicateStart",
    "DurableError",
    "EffectsSealed",
    "EngineError",
    "Fenced",
    "GroupMismatch",
    "GroupNotFound",
    "InconsistentRunState",
    "InputMismatch",
    "InvalidArgument",
    "InvalidCronExpression",
    "InvalidId",
    "InvalidOption",
    "InvalidQueueName",
    "InvalidSchedule",
    "InvalidState",
    "InvalidStoreUrl",
    "JobFailed",
    "JobNotFound",
    "JobTypeError",
    "KvValueTooLarge",
    "LogLocked",
    "MemberNotSubmitted",
    "MissingGuarantee",
    "NoEngine",
    "NonDeterminismError",
    "NotInWorkflow",
    "NotPublished",
    "ObjectExists",
    "ObjectNotFound",
    "ObjectStoreError",
    "ObjectStoreTimeout",
    "PartitionMismatch",
    "PayloadMissing",
    "QueueError",
    "ReadOnlyStore",
    "RequestAlreadyAnswered",
    "RequestFailed",
    "RequestRejected",
    "RequestUnanswered",
    "ReservedHeader",
    "ReservedKey",
    "ReservedMemoKey",
    "RunCancelled",
    "RunNotFound",
    "RunStalled",
    "RunTimedOut",
    "ScheduleNotFound",
    "SelfFenced",
    "SignalWaiterExists",
    "StaleEpoch",
    "StepMaybeExecutedError",
    "StoreClosed",
    "StoreError",
    "StoreNotFound",
    "StoreNotInitialized",
    "StreamClosed",
    "TypeMismatch",
    "UnknownExecutor",
    "UnknownWorkflow",
    "UnsafeFilesystem",
    "UnsupportedFormat",
    "UntrustedPayload",
    "WorkerLost",
    "WorkflowError",
    "WorkflowFailed",
    "WrongRunState",
]


class DurableError(Exception):
    """Root of every error `durable` raises on purpose.

    ``transient`` tells whether retrying the same call later may succeed.
    """

    transient: bool = False

    def __reduce__(self) -> tuple[object, ...]:
        # Rebuild without calling __init__ (subclasses take other arguments),
        # so a stored error (a failed workflow's) unpickles as its own type.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(
    cls: type[DurableError], args: tuple[object, ...], state: dict[str, object]
) -> DurableError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


# --------------------------------------------------------------------- store


class StoreError(DurableError):
    """An error of the storage layer (objects, log, blobs)."""


class ObjectStoreError(StoreError):
    """A call to the object-store backend failed; retrying may succeed.

    ``name`` is the object (or prefix) the call was about.
    """

    transient = True

    def __init__(self, message: str, *, name: str = "") -> None:
        super().__init__(message)
        self.name = name


class ObjectNotFound(ObjectStoreError, LookupError):
    """The named object does not exist."""

    transient = False

    def __init__(self, name: str) -> None:
        super().__init__(f"object {name!r} does not exist", name=name)


class ObjectExists(ObjectStoreError):
    """A create-if-absent found the name already taken."""

    transient = False

    def __init__(self, name: str) -> None:
        super().__init__(f"object {name!r} already exists", name=name)


class ObjectStoreTimeout(ObjectStoreError):
    """A backend call did not answer in time; its effect is unknown."""


class CorruptObject(StoreError):
    """An object failed its checksum, framing or decoding.

    Committed data is never dropped silently: opening a store whose log or
    checkpoint is corrupt raises this error naming the object.
    """

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(
            f"object {name!r} is corrupt: {reason}; restore it from a backup or "
            "remove the store's newer objects by hand after inspection"
        )
        self.name = name
        self.reason = reason


class CorruptRequest(StoreError):
    """A request object in a store's inbox cannot be decoded.

    ``name`` is the object's key (``inbox/...``). The owner that finds it
    moves it to ``inbox-corrupt/`` and logs an error event naming the key;
    the requests behind it are applied as usual. Nothing was applied for
    this one: the process that wrote it may send it again.
    """

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(
            f"inbox request {name!r} is corrupt: {reason}; it is not applied (the store's "
            "owner moves it to inbox-corrupt/ for inspection): send the request again"
        )
        self.name = name
        self.reason = reason


class UnsupportedFormat(StoreError):
    """An object was written by a format version this library cannot read.

    ``what``, when given, says what else in it this library does not know
    (e.g. a routing hash); its format ``version`` itself is then readable.
    """

    def __init__(self, name: str, version: int, supported: int, what: str | None = None) -> None:
        if what is None:
            message = (
                f"object {name!r} has format version {version}, this durable reads "
                f"versions up to {supported}: upgrade durable"
            )
        else:
            message = (
                f"object {name!r} uses {what}, which this durable does not know: upgrade durable"
            )
        super().__init__(message)
        self.name = name
        self.version = version


class PartitionMismatch(StoreError):
    """A store was opened with another number of partitions than it was created with.

    ``stored`` is the store's own count (1 for a store created unpartitioned,
    ``unpartitioned`` then True), ``requested`` the one asked for. Nothing
    was written. Permanent: the count is fixed when a store is created, since
    every run id is routed by it; open the store with ``partitions=stored``
    (or without ``partitions=``, which reads it).
    """

    def __init__(self, url: str, stored: int, requested: int, unpartitioned: bool = False) -> None:
        if unpartitioned:
            what = (
                f"store {url!r} was created unpartitioned (its log is at its root), so it "
                f"cannot be opened with partitions={requested}: open it without partitions= "
                "(a partitioned store is a new one, at another URL)"
            )
        else:
            what = (
                f"store {url!r} was created with partitions={stored}, not {requested}: open "
                f"it with partitions={stored}, or without partitions= (which reads it)"
            )
        super().__init__(
            f"{what}; the number of partitions cannot change after a store is created "
            "(every run id is routed by it)"
        )
        self.url = url
        self.stored = stored
        self.requested = requested
        self.unpartitioned = unpartitioned


class MissingGuarantee(StoreError):
    """The backend lacks an atomic primitive a writer needs."""

    def __init__(self, url: str, guarantee: str) -> None:
        super().__init__(
            f"cannot open a writer on {url!r}: the backend does not provide "
            f"{guarantee}; open it read-only, or use a backend that does"
        )
        self.url = url
        self.guarantee = guarantee


class StoreNotInitialized(StoreError):
    """A reader (a client, a read-only view) opened a location that holds no
    store (yet): no worker has opened it."""

    transient = True

    def __init__(self, url: str) -> None:
        super().__init__(
            f"no durable store at {url!r}: no worker has opened it yet; start a worker on it "
            "first (`Engine(url)`, which creates the store), or check the URL"
        )
        self.url = url


class StoreNotFound(StoreError, LookupError):
    """The bucket or container a store URL names does not exist.

    Permanent: create it (or fix the URL), then open the store again.
    ``location`` says which, e.g. ``"S3 bucket 'name'"``.
    """

    def __init__(self, url: str, location: str) -> None:
        super().__init__(
            f"cannot open store {url!r}: the {location} does not exist; create it "
            "(or fix the URL), then open the store again"
        )
        self.url = url
        self.location = location


class InvalidStoreUrl(StoreError, ValueError):
    """A store location is not a path, a URL or an `ObjectStore`, or its
    scheme names no backend; nothing was opened."""

    def __init__(self, url: object, reason: str) -> None:
        super().__init__(f"invalid store URL {url!r}: {reason}")
        self.url = url
        self.reason = reason


class Fenced(StoreError):
    """Another writer opened the store; this one must stop.

    Nothing this writer commits from now on is accepted, and nothing it wrote
    before is overwritten.
    """

    def __init__(self, url: str, seq: int) -> None:
        super().__init__(
            f"store {url!r} was opened by another writer (log object {seq} is "
            "theirs): this writer is fenced and must stop; reopen to continue"
        )
        self.url = url
        self.seq = seq


class SelfFenced(Fenced):
    """The writer stopped itself: it can no longer be sure it owns the store.

    Raised by a commit made while the writer's validity check
    (`LogWriter.set_validity`) gave a reason, e.g. an owner whose heartbeat
    could not be renewed for most of its TTL; nothing of that commit, or of
    any later one, is applied. Like `Fenced`: reopen (or take ownership
    again) to continue. ``reason`` is the check's text; ``seq`` is the
    writer's last durable log sequence number (no other writer's object was
    seen).
    """

    def __init__(self, url: str, reason: str, seq: int = 0) -> None:
        StoreError.__init__(
            self,
            f"store {url!r}: this writer stopped itself ({reason}); it commits nothing "
            "more: reopen the store (or take ownership again) to continue",
        )
        self.url = url
        self.seq = seq
        self.reason = reason


class LogLocked(Fenced):
    """A writer could not open a segment-log store: a live process holds its lock.

    A store on the local segment medium (`durable.store.objects.segments`)
    admits one writer at a time through an exclusive ``flock`` on its lock
    file; the kernel releases it when the holder exits, kill -9 included,
    so this means the holder is alive (in this process or another). ``path``
    is the lock file. Nothing was written.
    """

    def __init__(self, url: str, path: str) -> None:
        StoreError.__init__(
            self,
            f"store {url!r} is held by another live writer: the lock file {path!r} is "
            "locked (flock); stop that process, or wait for it to exit, then open again",
        )
        self.url = url
        self.seq = 0
        self.path = path


class UnsafeFilesystem(StoreError):
    """The segment log medium refused a directory on a network filesystem.

    The medium (`durable.store.objects.segments`) fences writers with
    ``flock`` and makes commits durable with ``fdatasync``; on a network
    filesystem (NFS, SMB/CIFS, 9p, sshfs...) neither can be trusted, so a
    writer is refused before anything is written. ``fstype`` is the
    filesystem's type, as ``/proc/self/mountinfo`` names it.
    """

    def __init__(self, url: str, fstype: str) -> None:
        super().__init__(
            f"store {url!r} is on a {fstype} filesystem, where flock and fdatasync cannot "
            "be trusted: the segment log refuses it; open the directory as a plain path "
            "(its log then stays objects), or use a local disk or an object store URL"
        )
        self.url = url
        self.fstype = fstype


class StaleEpoch(Fenced):
    """A writer refused to open a store at an epoch older than the store's own.

    A partition's owner opens its store at the epoch the assignment table
    gave it (`LogWriter.open` with ``epoch=``); every open marker carries
    it, and the log keeps the newest. An open at a lower ``epoch`` than the
    log's ``newest`` acts on a table that a newer version superseded: a
    newer owner holds the partition. The open writes nothing (the newer
    owner is not fenced); re-read the assignment table. Like `Fenced`, this
    writer must not write; ``seq`` is the log's last sequence number seen.
    """

    def __init__(self, url: str, epoch: int, newest: int, seq: int = 0) -> None:
        StoreError.__init__(
            self,
            f"store {url!r} was opened at epoch {newest} by a newer owner, so it is not "
            f"opened at epoch {epoch}: a newer owner holds the partition; nothing was "
            "written: re-read the assignment table",
        )
        self.url = url
        self.seq = seq
        self.epoch = epoch
        self.newest = newest


class StoreClosed(StoreError):
    """The store was closed, or stopped after an unrecoverable write failure."""

    def __init__(self, url: str, reason: str = "closed") -> None:
        super().__init__(f"store {url!r} is not usable: {reason}")
        self.url = url
        self.reason = reason


class BlobMissing(StoreError, LookupError):
    """A value's blob object is missing (a reader raced its removal)."""

    transient = True

    def __init__(self, name: str) -> None:
        super().__init__(f"blob {name!r} is missing; re-read the key")
        self.name = name


class ReadOnlyStore(StoreError):
    """A write was attempted through a read-only view (one over a `LogReader`).

    Nothing was written. Permanent: write through the store's writer instead.
    """

    def __init__(self, url: str, operation: str) -> None:
        super().__init__(
            f"cannot {operation} through a read-only view of store {url!r}; "
            "write through the store's writer"
        )
        self.url = url
        self.operation = operation


# --------------------------------------------------------------------- queue


class QueueError(DurableError):
    """An error of the queue or its KV namespace."""


class InvalidQueueName(QueueError, ValueError):
    """A queue name is too long or not valid UTF-8."""

    def __init__(self, queue: str, reason: str) -> None:
        super().__init__(f"invalid queue name {queue!r}: {reason}")
        self.queue = queue
        self.reason = reason


class InvalidId(QueueError, ValueError):
    """An id (job id, run id) is not 1-128 bytes of ``[A-Za-z0-9_-]``."""

    def __init__(self, id: str, reason: str) -> None:
        super().__init__(f"invalid id {id!r}: {reason}")
        self.id = id
        self.reason = reason


class InvalidOption(QueueError, ValueError):
    """An option has a value out of its range."""


class DuplicateJobId(QueueError, ValueError):
    """An enqueue named an id that a live job already has; nothing was written."""

    def __init__(self, id: str) -> None:
        super().__init__(f"job id {id!r} is already in use by a live job; nothing was written")
        self.id = id


class KvValueTooLarge(QueueError, ValueError):
    """A KV value exceeds the maximum size; nothing was written."""

    def __init__(self, key: bytes, size: int, max: int) -> None:
        super().__init__(
            f"KV value for key {key!r} is {size} bytes, the maximum is {max}; "
            "store large data elsewhere and keep a reference"
        )
        self.key = key
        self.size = size
        self.max = max


class ReservedKey(QueueError, ValueError):
    """A caller KV key falls under a prefix reserved by a layer of durable."""

    def __init__(self, key: bytes, prefix: bytes) -> None:
        super().__init__(
            f"KV key {key!r} is under the reserved prefix {prefix!r}; choose another key"
        )
        self.key = key
        self.prefix = prefix


class ConflictingKvEffect(QueueError, ValueError):
    """A key is both written and deleted by one set of effects."""

    def __init__(self, key: bytes) -> None:
        super().__init__(f"KV key {key!r} is both put and deleted in one set of effects")
        self.key = key


class JobNotFound(QueueError, LookupError):
    """The job does not exist (any more)."""

    def __init__(self, id: str) -> None:
        super().__init__(f"job {id!r} not found")
        self.id = id


class PayloadMissing(QueueError, LookupError):
    """A live job's offloaded payload object is missing."""

    def __init__(self, id: str) -> None:
        super().__init__(f"payload object of job {id!r} is missing")
        self.id = id


class InvalidState(QueueError):
    """The job is not in the state the operation needs."""

    def __init__(self, id: str, state: str, needed: str) -> None:
        super().__init__(f"job {id!r} is {state}, the operation needs {needed}")
        self.id = id
        self.state = state


class ClaimLost(QueueError):
    """The claim no longer holds its job (lease reaped, or already settled)."""

    def __init__(self, id: str) -> None:
        super().__init__(
            f"claim on job {id!r} is lost (its lease was reaped or it was settled); "
            "nothing was applied"
        )
        self.id = id


class CancelRequested(QueueError):
    """The job was asked to cancel; its lease cannot be renewed."""

    def __init__(self, id: str) -> None:
        super().__init__(f"job {id!r} was asked to cancel")
        self.id = id


class CorruptRecord(QueueError):
    """A record the queue stored (job, history, counter) cannot be decoded.

    ``where`` names the record (its key or job id). Permanent: the record is
    left in place for inspection and skipped by background tasks.
    """

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"stored record {where} cannot be decoded: {reason}")
        self.where = where
        self.reason = reason


# -------------------------------------------------------------------- engine


class EngineError(DurableError):
    """An error of the workflow runtime (`durable.engine`)."""


class InputMismatch(EngineError, ValueError):
    """A run id was submitted again with a different input; nothing was written.

    ``submit`` is idempotent on ``(run_id, input)``: the same input again is a
    no-op, another input under the same active run id is this error.
    """

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id!r} was already submitted with a different input; "
            "submit the new input under another run id, or wait for the run to end"
        )
        self.run_id = run_id


class DuplicateStart(EngineError):
    """A start with a dedup key that an active run holds; nothing started.

    ``key`` is the dedup key, ``run_id`` the active run holding it,
    ``workflow`` the workflow's name. Once that run has ended the key may
    start again (`durable.decorators.dedup`).
    """

    def __init__(self, key: str, run_id: str, workflow: str) -> None:
        super().__init__(
            f"workflow {workflow!r}: dedup key {key!r} is held by active run {run_id!r}; "
            "wait for it (or cancel it) before starting another with this key"
        )
        self.key = key
        self.run_id = run_id
        self.workflow = workflow


class ReservedHeader(EngineError, ValueError):
    """A submitted header name is under the runtime's reserved ``workflow.`` prefix."""

    def __init__(self, header: str, prefix: str) -> None:
        super().__init__(
            f"header {header!r} is under the prefix {prefix!r}, which the runtime "
            "reserves for the headers it sets on step jobs; rename the header"
        )
        self.header = header
        self.prefix = prefix


class InvalidArgument(EngineError, ValueError):
    """A value given to an engine type has the wrong type or is out of range.

    Raised when the value (a run option, a trigger, an outcome) is built,
    before anything is written.
    """


class CorruptEngineRecord(EngineError):
    """A record the engine stored (run record, step pointer, terminal or
    result record) cannot be decoded.

    ``what`` names the record. Permanent: rewriting is the runtime's call.
    """

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"stored {what} cannot be decoded: {reason}")
        self.what = what
        self.reason = reason


class ReservedMemoKey(EngineError, ValueError):
    """User code wrote a run-memo key the runtime reserves (``workflow.outcome``).

    Nothing was written (and no compute function was called); use another key.
    """

    def __init__(self, key: str, run_id: str) -> None:
        super().__init__(
            f"memo key {key!r} of run {run_id!r} is reserved for the workflow runtime "
            "(it holds the run result record); use another key"
        )
        self.key = key
        self.run_id = run_id


class EffectsSealed(EngineError):
    """A step staged KV effects after it had returned; they would be lost."""

    def __init__(self) -> None:
        super().__init__(
            "the step has returned: its effects were settled; stage effects before the step returns"
        )


class InconsistentRunState(EngineError):
    """A step of a run was delivered, but the run's record is missing.

    The step is dead-lettered; inspect it with the queue's dead-letter listing.
    """

    def __init__(self, run_id: str, step: int, what: str) -> None:
        super().__init__(f"run {run_id!r} step {step}: {what}")
        self.run_id = run_id
        self.step = step


class SignalWaiterExists(EngineError):
    """A run registered to wait on a correlation key another run already waits on.

    One waiter per key: the second run fails. Choose keys unique to the
    waiter (include the run id).
    """

    def __init__(self, key: str, run_id: str) -> None:
        super().__init__(
            f"run {run_id!r}: a waiter is already registered for correlation key {key!r}; "
            "use a key unique to the waiting run (include its run id)"
        )
        self.key = key
        self.run_id = run_id


class GroupNotFound(EngineError, LookupError):
    """A run group was resumed, but no manifest of it is stored."""

    def __init__(self, group_id: str) -> None:
        super().__init__(
            f"run group {group_id!r} has no manifest; submit it first (or it was forgotten)"
        )
        self.group_id = group_id


class GroupMismatch(EngineError, ValueError):
    """A run group was submitted again with a different member list; nothing written."""

    def __init__(self, group_id: str, detail: str) -> None:
        super().__init__(
            f"run group {group_id!r} was already submitted with other members ({detail}); "
            "resubmit the same members, or use another group id"
        )
        self.group_id = group_id


class DuplicateMemberKey(EngineError, ValueError):
    """Two members of one run group submission share a key; nothing written."""

    def __init__(self, group_id: str, key: str) -> None:
        super().__init__(
            f"run group {group_id!r}: member key {key!r} appears more than once; "
            "give every member its own key"
        )
        self.group_id = group_id
        self.key = key


class MemberNotSubmitted(EngineError):
    """A member of a group's manifest has no member record (its submission
    never committed); `RunGroup.resume` submits it."""

    def __init__(self, group_id: str, key: str) -> None:
        super().__init__(
            f"run group {group_id!r}: member {key!r} is in the manifest but was never "
            "submitted; call resume() to submit it"
        )
        self.group_id = group_id
        self.key = key


class JobTypeError(EngineError, ValueError):
    """A job type cannot be registered or used (no name, a duplicate name,
    registration after the runner started, an unknown type)."""


class JobFailed(EngineError):
    """A typed job ended in an error; ``kind`` is ``"transient"`` or ``"permanent"``.

    Raised by awaiting the job's handle; ``message`` is the job's error text.
    """

    def __init__(self, job_id: str, kind: str, message: str) -> None:
        super().__init__(f"job {job_id!r} failed ({kind}): {message}")
        self.job_id = job_id
        self.kind = kind
        self.message = message


class BulkFailureThreshold(EngineError):
    """A bulk run ended with more failed items than its ``fail_threshold`` allows.

    Raised after the run has stopped and flushed its sink: every item's
    outcome is stored, and ``report`` holds the run's `BulkReport`. Fix the
    cause and run the same batch again: only the items that did not succeed
    run again.
    """

    def __init__(self, failed: int, total: int, threshold: float, report: object = None) -> None:
        share = 100 * failed / total if total else 0.0
        super().__init__(
            f"bulk run: {failed} of {total} items failed ({share:.1f}%), above the "
            f"threshold of {threshold}%; the report is on .report, and running the same "
            "batch again runs only the items that did not succeed"
        )
        self.failed = failed
        self.total = total
        self.threshold = threshold
        #: The run's `durable.engine.bulk.BulkReport`.
        self.report = report


class InvalidCronExpression(EngineError, ValueError):
    """A cron schedule's expression is not a valid five-field POSIX expression."""

    def __init__(self, name: str, expression: str, reason: str) -> None:
        super().__init__(
            f"cron schedule {name!r}: {expression!r} is not a five-field cron expression "
            f"(minute hour day-of-month month day-of-week, UTC): {reason}"
        )
        self.name = name
        self.expression = expression


class DuplicateScheduleName(EngineError, ValueError):
    """A cron schedule name was registered twice on one scheduler."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"cron schedule {name!r} is already registered; give each schedule its own name"
        )
        self.name = name


class InvalidSchedule(EngineError, ValueError):
    """A workflow schedule cannot be used as given: its id, its time zone,
    its backfill window (`durable.engine.schedules`)."""

    def __init__(self, schedule_id: str, reason: str) -> None:
        super().__init__(f"schedule {schedule_id!r}: {reason}")
        self.schedule_id = schedule_id
        self.reason = reason


class ScheduleNotFound(EngineError, LookupError):
    """No workflow schedule of that id in the store."""

    def __init__(self, schedule_id: str, what: str = "") -> None:
        where = f" ({what})" if what else ""
        super().__init__(f"no schedule {schedule_id!r} in the store{where}: see engine.schedules()")
        self.schedule_id = schedule_id


# ----------------------------------------------------------------- decorators


class WorkflowError(DurableError):
    """An error of the decorator layer (`@workflow`, `@step`, `@job`, `Engine`)."""


class DecoratorError(WorkflowError, TypeError):
    """A decorator was misused (a non-async function, a duplicate name);
    raised at decoration time, with the fix in the message."""


class ArgumentMismatch(WorkflowError, TypeError):
    """Arguments that do not fit the signature of a workflow or a job.

    Raised by the call that starts the run or submits the job (nothing is
    written), naming the function and the argument. A run whose stored
    arguments no longer fit (the code changed after it was started) fails
    with it at once, ``run_id`` set.
    """

    def __init__(
        self, kind: str, name: str, signature: str, detail: str, run_id: str | None = None
    ) -> None:
        if run_id is None:
            message = (
                f"{kind} {name!r} cannot be called with these arguments: {detail}; "
                f"its signature is {signature}"
            )
        else:
            message = (
                f"run {run_id!r}: its stored arguments no longer fit {kind} {name!r}: "
                f"{detail}; the signature is now {signature} (the code changed after the "
                "run was started): start a new run with arguments that fit, or restore "
                "the signature it was started with"
            )
        super().__init__(message)
        self.kind = kind
        self.name = name
        self.signature = signature
        self.detail = detail
        self.run_id = run_id


class NoEngine(WorkflowError):
    """A call needs a running `Engine`, and none is running in this context."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what} needs a running Engine: use `async with durable.Engine(...):` "
            "around the code that starts or submits work"
        )
        self.what = what


class NotInWorkflow(WorkflowError):
    """A call that only makes sense inside a running workflow was made outside one."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} can only be called inside a running @workflow function")
        self.what = what


class UnknownWorkflow(WorkflowError):
    """A run names a workflow this process has not registered; the run fails."""

    def __init__(self, run_id: str, name: str) -> None:
        module = name.rpartition(".")[0] or name
        if module == "__main__":
            fix = (
                "it was defined in a __main__ with no file (an interactive session, a "
                "notebook or `python -c`), so only a process that defines it again in its "
                "own __main__ can run it; for runs that must outlive that process, define "
                "workflows in a module file (or a script) and import it, or pin "
                "@workflow(name=...)"
            )
        else:
            fix = f"import the module that defines it ({module!r}) before starting the Engine"
        super().__init__(
            f"run {run_id!r} is a run of workflow {name!r}, which this process does not know: {fix}"
        )
        self.run_id = run_id
        self.name = name


class NonDeterminismError(WorkflowError):
    """A replayed workflow called a different step than its journal holds at a position.

    Workflow code must call the same steps in the same order on every replay;
    the run fails with this error.
    """

    def __init__(self, run_id: str, position: int, journaled: str, new: str) -> None:
        super().__init__(
            f"run {run_id!r}: non-deterministic workflow: position {position} was "
            f"{journaled!r} in the journal but the code now calls {new!r}; keep the order "
            "of step calls stable (pin names with name=...), or start a new run"
        )
        self.run_id = run_id
        self.position = position
        self.journaled = journaled
        self.new = new


def _span(seconds: float) -> str:
    """``seconds`` in the largest unit that keeps it >= 1 (``30 days``, ``90 s``)."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.4g} {unit}"
    return f"{seconds:.4g} s"


class ClockNotAdvanced(WorkflowError, TimeoutError):
    """``handle.result()`` waited for a run parked on a time of a `MockClock`
    that nothing advanced for the clock's ``stall_after`` real seconds."""

    def __init__(self, run_id: str, until_ms: int, now_ms: int, stalled: float) -> None:
        ahead = _span((until_ms - now_ms) / 1000)
        super().__init__(
            f"run {run_id!r} waits for a time of the MockClock {ahead} ahead of it "
            f"(at {until_ms} ms; the clock reads {now_ms} ms), and nothing advanced the clock "
            f"for {stalled:g} s of real time: advance it in the test (clock.advance(seconds) "
            "or clock.set(ms)), or let durable skip the time with "
            "`await durable.testing.run_until_settled(handle)`"
        )
        self.run_id = run_id
        self.until_ms = until_ms
        self.now_ms = now_ms


class StepMaybeExecutedError(WorkflowError):
    """An ``at_most_once`` step had started before a crash and has no result:
    it may have run, so it is not run again."""

    def __init__(self, run_id: str, position: int, name: str) -> None:
        super().__init__(
            f"run {run_id!r}: at-most-once step {name!r} at position {position} started "
            "before a crash and may have run; it is not run again (check its effect, then "
            "handle this error in the workflow)"
        )
        self.run_id = run_id
        self.position = position
        self.name = name


class CacheKeyError(WorkflowError, TypeError):
    """The ``cache_key`` function of a ``@step(cache_key=...)`` raised, or
    returned something else than a ``str``. Permanent: the step fails
    without running its body, whatever its retry policy."""

    def __init__(self, run_id: str, position: int, name: str, problem: str) -> None:
        super().__init__(
            f"run {run_id!r}: the cache_key function of step {name!r} (position "
            f"{position}) {problem}; it must return a str computed from the step's arguments"
        )
        self.run_id = run_id
        self.position = position
        self.name = name


class UnknownExecutor(WorkflowError, LookupError):
    """A ``@step`` or ``@job`` names an executor its `Engine` was not given
    (``Engine(executors=...)``). Permanent: the step fails without running,
    whatever its retry policy."""

    def __init__(self, executor: str, what: str, known: list[str]) -> None:
        super().__init__(
            f"{what} runs on executor {executor!r}, but this Engine has only "
            f"{', '.join(repr(k) for k in known)}: pass Engine(executors={{{executor!r}: ...}})"
        )
        self.executor = executor
        self.what = what
        self.known = known


class WorkerLost(WorkflowError):
    """The body of a step (or job) was lost on its executor before it
    answered: its worker died (Dask's ``KilledWorker``), the connection
    closed, or the scheduler or the client went away. Transient: the step is
    attempted again per its retry policy (``max_attempts`` and ``backoff``,
    whatever its ``retry_on``); the body may have run, in part or in full.
    ``run_id``, ``step`` and ``executor`` are set once the step has named it
    (empty when an executor raises it)."""

    transient = True

    def __init__(
        self, reason: str, *, run_id: str = "", step: str = "", executor: str = ""
    ) -> None:
        where = f"step {step!r} of run {run_id!r}" if step else "a step body"
        on = f" on executor {executor!r}" if executor else ""
        super().__init__(f"{where} lost its worker{on}: {reason}")
        self.reason = reason
        self.run_id = run_id
        self.step = step
        self.executor = executor


class RunStalled(WorkflowError):
    """A run's deliveries ended ``attempts`` times in a row without journaling
    anything (each crashed its process, lost its lease or failed
    transiently): a poison run. It fails with this error so that it cannot
    take the workers down again; ``position`` is where its journal stood
    (`engine.fork` from there reruns it from that point once it is fixed)."""

    def __init__(
        self,
        run_id: str,
        workflow: str,
        position: int,
        where: str,
        attempts: int,
        last_error: str | None = None,
    ) -> None:
        error = f"; the last error recorded: {last_error}" if last_error else ""
        super().__init__(
            f"run {run_id!r} of workflow {workflow!r} made no progress in {attempts} "
            f"attempts in a row: each ended (its process crashed or was killed, it lost its "
            f"lease, or it failed transiently) before it journaled anything, at journal "
            f"position {position} ({where}){error}. The run is failed so that it cannot take "
            "the workers down again: find what ends the process there, fix it, then start "
            f"the run again or fork it from position {position} (engine.fork); "
            "Engine(max_attempts_without_progress=...) sets the limit"
        )
        self.run_id = run_id
        self.workflow = workflow
        self.position = position
        self.attempts = attempts
        self.last_error = last_error


class RunCancelled(WorkflowError):
    """The run was cancelled before it finished."""

    def __init__(self, run_id: str, reason: str | None = None) -> None:
        detail = f": {reason}" if reason else ""
        super().__init__(f"run {run_id!r} was cancelled{detail}")
        self.run_id = run_id
        self.reason = reason


class RunTimedOut(RunCancelled):
    """The run had not ended ``timeout`` seconds (of the engine's clock) after
    it started (``@workflow(timeout=...)``): it was cancelled, its child runs
    too. A `RunCancelled`, so code catching that catches this."""

    def __init__(self, run_id: str, timeout: float) -> None:
        super().__init__(run_id, f"timed out: not ended {timeout:g} s after it started")
        self.timeout = timeout


class RunNotFound(WorkflowError, LookupError):
    """The store holds no run of this id (never started, or forgotten after
    its retention)."""

    def __init__(self, run_id: str, what: str = "") -> None:
        doing = f"{what}: " if what else ""
        super().__init__(
            f"{doing}run {run_id!r} is unknown to this store: start it first, or check the id "
            "(a terminated run is forgotten once the engine's retention has passed)"
        )
        self.run_id = run_id


class RequestFailed(EngineError):
    """The store's owner applied a request sent through its inbox, and the
    request failed there: ``error_type`` (the exception's class name) and
    ``error`` (its message) as the owner's done record has them."""

    def __init__(self, what: str, error_type: str | None, error: str) -> None:
        super().__init__(f"{what} failed in the store's owner: {error_type or 'error'}: {error}")
        self.error_type = error_type
        self.error = error


class WrongRunState(WorkflowError):
    """A run control refused because of the run's state: ``engine.resume``
    of a run that is not failed or cancelled, ``engine.forget`` of a run
    that has not terminated. ``state`` is the run's state (a lowercase
    string: ``"running"``, ``"succeeded"``, ...)."""

    def __init__(self, run_id: str, what: str, state: str, wanted: str) -> None:
        super().__init__(f"{what}: run {run_id!r} is {state}; only {wanted} runs can be")
        self.run_id = run_id
        self.state = state


class NotPublished(WorkflowError, LookupError):
    """A run terminated without ever publishing a value under this key."""

    def __init__(self, run_id: str, key: str) -> None:
        super().__init__(
            f"run {run_id!r} has terminated without publishing anything under {key!r}; "
            "check the key against the workflow's durable.publish calls"
        )
        self.run_id = run_id
        self.key = key


class RequestRejected(WorkflowError):
    """The run rejected the request (``await req.reject(reason)``):
    ``reason`` is what it said; nothing was answered."""

    def __init__(self, run_id: str, name: str, request_id: str, reason: str) -> None:
        super().__init__(f"run {run_id!r} rejected request {name!r} ({request_id}): {reason}")
        self.run_id = run_id
        self.name = name
        self.request_id = request_id
        self.reason = reason


class RequestUnanswered(WorkflowError):
    """The run ended (succeeded, failed or was cancelled) without replying
    to the request nor rejecting it."""

    def __init__(self, run_id: str, name: str, request_id: str) -> None:
        super().__init__(
            f"run {run_id!r} ended without answering request {name!r} ({request_id}); "
            "a run answers a request with `await req.reply(value)` or `req.reject(reason)`"
        )
        self.run_id = run_id
        self.name = name
        self.request_id = request_id


class RequestAlreadyAnswered(WorkflowError):
    """``reply`` or ``reject`` on a request already answered: each request
    is answered at most once; the first answer stands."""

    def __init__(self, run_id: str, name: str, request_id: str) -> None:
        super().__init__(
            f"run {run_id!r}: request {name!r} ({request_id}) is already answered; "
            "a request is answered once"
        )
        self.run_id = run_id
        self.name = name
        self.request_id = request_id


class StreamClosed(WorkflowError):
    """A value was written to a stream of a run after the stream was closed
    (``durable.close_stream``); nothing was written."""

    def __init__(self, run_id: str, key: str) -> None:
        super().__init__(
            f"stream {key!r} of run {run_id!r} is closed: nothing more can be written to it"
        )
        self.run_id = run_id
        self.key = key


class WorkflowFailed(WorkflowError):
    """A workflow (or step, or job) raised an exception that cannot be rebuilt
    here; ``type_name`` and ``message`` describe it, ``remote_traceback`` is
    its formatted traceback when known."""

    def __init__(
        self, run_id: str, type_name: str, message: str, remote_traceback: str | None = None
    ) -> None:
        super().__init__(f"run {run_id!r} failed with {type_name}: {message}")
        self.run_id = run_id
        self.type_name = type_name
        self.message = message
        self.remote_traceback = remote_traceback


class CodecError(WorkflowError, TypeError):
    """A value cannot be encoded (or a stored one decoded) by the codec;
    the message names the value (which argument or result) and the fix."""


class TypeMismatch(CodecError):
    """A decoded value does not fit the type it is read as: the annotation
    of a workflow's or job's parameter or result, of a step's result, or
    the ``type=`` of ``wait_for_signal`` / ``handle.get``. ``what`` names
    the value (the run, step or key), ``expected`` the type."""

    def __init__(self, what: str, expected: str, detail: str) -> None:
        self.what = what
        self.expected = expected
        self.detail = detail
        super().__init__(f"{what} does not fit {expected}: {detail}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.what, self.expected, self.detail))


class CodecMismatch(WorkflowError):
    """An `Engine`'s codec configuration does not match what the store
    recorded its payloads need (a signing key it lacks, another key, a
    codec that cannot read them): the engine refuses to open, before it
    reads or writes a run. ``need`` says what is missing."""

    def __init__(self, url: str, need: str) -> None:
        super().__init__(
            f"Engine refused to open store {url!r}: {need} (the store records the codec "
            "and the fingerprints of the signing keys its payloads need; see the codec "
            "guide, 'Keys and the store')"
        )
        self.url = url
        self.need = need


class UntrustedPayload(WorkflowError):
    """A stored pickle is unsigned or its signature does not match the
    engine's signing key; it was refused, never unpickled."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(
            f"refused to unpickle {what}: {reason}; pickles are only read when signed "
            "with this Engine's signing_key"
        )
        self.what = what
        self.reason = reason
