"""durable: durable execution for async Python on object storage.

```python
import durable
from durable import Engine, job, step, workflow

@step
async def shout(text: str) -> str:
    return text.upper()

@workflow
async def greet(name: str) -> str:
    return await shout(f"hello, {name}")

async with Engine("file:///var/lib/app/durable"):
    print(await greet("durable"))
```

The decorators (`workflow`, `step`, `job`) and the `Engine` are here; the layers below are
`durable.engine` (the workflow runtime) and `durable.store` (the queue and
KV store on an object store).
"""

__version__ = "0.1.0.dev0"  # first: modules imported below read it

from durable.decorators import (
    Backoff,
    Engine,
    InlineExecutor,
    JobFunction,
    JobHandle,
    JobSubmitter,
    MapHandle,
    Progress,
    Request,
    RunPage,
    RunSummary,
    ScheduleInfo,
    StepExecutor,
    StepFunction,
    StreamDiscarded,
    Waiting,
    Workflow,
    WorkflowHandle,
    WorkflowStarter,
    WorkflowState,
    WorkflowStatus,
    close_stream,
    continue_as_new,
    job,
    patched,
    publish,
    receive,
    run_id,
    set_attributes,
    sleep,
    step,
    wait_for_signal,
    workflow,
    write_stream,
)
from durable.engine.signals import SignalOutcome
from durable.errors import (
    ArgumentMismatch,
    CacheKeyError,
    CodecError,
    CodecMismatch,
    DecoratorError,
    DuplicateStart,
    Fenced,
    NoEngine,
    NonDeterminismError,
    NotInWorkflow,
    NotPublished,
    PartitionMismatch,
    RequestAlreadyAnswered,
    RequestRejected,
    RequestUnanswered,
    RunCancelled,
    RunNotFound,
    RunStalled,
    RunTimedOut,
    SelfFenced,
    StaleEpoch,
    StepMaybeExecutedError,
    StoreNotFound,
    StreamClosed,
    TypeMismatch,
    UnknownExecutor,
    UnknownWorkflow,
    UntrustedPayload,
    WorkerLost,
    WorkflowError,
    WorkflowFailed,
    WrongRunState,
)

__all__ = [
    "ArgumentMismatch",
    "Backoff",
    "CacheKeyError",
    "CodecError",
    "CodecMismatch",
    "DecoratorError",
    "DuplicateStart",
    "Engine",
    "Fenced",
    "InlineExecutor",
    "JobFunction",
    "JobHandle",
    "JobSubmitter",
    "MapHandle",
    "NoEngine",
    "NonDeterminismError",
    "NotInWorkflow",
    "NotPublished",
    "PartitionMismatch",
    "Progress",
    "Request",
    "RequestAlreadyAnswered",
    "RequestRejected",
    "RequestUnanswered",
    "RunCancelled",
    "RunNotFound",
    "RunPage",
    "RunStalled",
    "RunSummary",
    "RunTimedOut",
    "ScheduleInfo",
    "SelfFenced",
    "SignalOutcome",
    "StaleEpoch",
    "StepExecutor",
    "StepFunction",
    "StepMaybeExecutedError",
    "StoreNotFound",
    "StreamClosed",
    "StreamDiscarded",
    "TypeMismatch",
    "UnknownExecutor",
    "UnknownWorkflow",
    "UntrustedPayload",
    "Waiting",
    "WorkerLost",
    "Workflow",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowStarter",
    "WorkflowState",
    "WorkflowStatus",
    "WrongRunState",
    "close_stream",
    "continue_as_new",
    "job",
    "patched",
    "publish",
    "receive",
    "run_id",
    "set_attributes",
    "sleep",
    "step",
    "wait_for_signal",
    "workflow",
    "write_stream",
]
