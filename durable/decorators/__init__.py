"""``@workflow``, ``@step`` and ``@job`` on top of the engine (all exported from `durable`).

```python
import durable
from durable import Engine, step, workflow

@step(max_attempts=3, backoff=durable.Backoff(initial=1.0))
async def fetch(url: str) -> str: ...

@workflow
async def pipeline(url: str) -> str:
    text = await fetch(url)                  # journaled: never repeated once done
    await durable.sleep(3600)                # a durable timer: holds no worker
    return text

async with Engine("file:///var/lib/app/durable"):
    handle = await pipeline.start("https://example.com")
    print(await handle.result())
```

The pieces, one module each: the `Engine` (`engine`), the decorators
(`workflow`, `step`), the retry policy (`backoff`, `attempts`), durable
waits (`waits`, `parking`), child workflows (`children`), handles
(`handles`, `status`, `waiting`, `published`), the journal (`journal`), run archives
(`archive`, `terminal`), publish and fork (`publish`, `fork`), the run
context (`context`), the delivery runner (`runner`), the codec (`codec`)
and `@job` (`jobs`).
"""

from durable.decorators.attributes import set_attributes
from durable.decorators.backoff import Backoff
from durable.decorators.context import run_id
from durable.decorators.continuation import continue_as_new
from durable.decorators.current import current_engine
from durable.decorators.engine import Engine
from durable.decorators.executors import InlineExecutor, StepExecutor
from durable.decorators.handles import WorkflowHandle
from durable.decorators.jobs import JobFunction, JobHandle, JobSubmitter, MapHandle, job
from durable.decorators.listing import RunPage, RunSummary
from durable.decorators.patching import patched
from durable.decorators.publish import publish
from durable.decorators.requests import Request, receive
from durable.decorators.schedules import ScheduleInfo
from durable.decorators.status import WorkflowState, WorkflowStatus
from durable.decorators.step import StepFunction, step
from durable.decorators.streams import StreamDiscarded, close_stream, write_stream
from durable.decorators.waiting import Waiting
from durable.decorators.waits import sleep, wait_for_signal
from durable.decorators.workflow import Workflow, WorkflowStarter, workflow
from durable.engine.progress import Progress

__all__ = [
    "Backoff",
    "Engine",
    "InlineExecutor",
    "JobFunction",
    "JobHandle",
    "JobSubmitter",
    "MapHandle",
    "Progress",
    "Request",
    "RunPage",
    "RunSummary",
    "ScheduleInfo",
    "StepExecutor",
    "StepFunction",
    "StreamDiscarded",
    "Waiting",
    "Workflow",
    "WorkflowHandle",
    "WorkflowStarter",
    "WorkflowState",
    "WorkflowStatus",
    "close_stream",
    "continue_as_new",
    "current_engine",
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
