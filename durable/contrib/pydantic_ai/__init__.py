"""Durable Pydantic AI agents (the ``pydantic-ai`` extra: pydantic-ai-slim).

```python
from pydantic_ai import Agent
from durable.contrib.pydantic_ai import DurableAgent, Durability

agent = Agent("openai:gpt-5", name="support", capabilities=[Durability()])
support = DurableAgent(agent)          # at import time, in workers and clients

async with Engine(url):
    answer = await support.run("Where is my order?")
```

The agent's run is a ``@workflow``; each model request and each tool call a
journaled step (the tool calls of one response concurrently); a tool that
needs approval (``requires_approval=True`` with Pydantic AI's
``RequestInput`` capability) waits durably for a signal
(`resolve_external_event`). Built on ``pydantic_ai.durable_exec``, like
Pydantic AI's own Temporal, DBOS and Prefect integrations.
"""

try:
    import pydantic_ai  # noqa: F401
except ImportError as error:  # pragma: no cover - the extra is missing
    raise ImportError(
        "durable.contrib.pydantic_ai needs Pydantic AI: pip install 'durable[pydantic-ai]'"
    ) from error

from ._agent import DurableAgent
from ._durability import Durability, StepOptions, resolve_external_event

__all__ = ["Durability", "DurableAgent", "StepOptions", "resolve_external_event"]
