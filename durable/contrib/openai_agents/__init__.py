"""Durable OpenAI Agents SDK runs (the ``openai-agents`` extra).

```python
from agents import Agent
from durable.contrib.openai_agents import DurableRunner

@durable.workflow
async def support(question: str) -> str:
    result = await DurableRunner.run(agent, question)   # instead of Runner.run
    return result.final_output
```

Inside the workflow each model call and each function-tool call is a
journaled step; a tool with ``needs_approval`` waits durably for a signal
(`approval_key`).
"""

try:
    import agents  # noqa: F401
except ImportError as error:  # pragma: no cover - the extra is missing
    raise ImportError(
        "durable.contrib.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'durable[openai-agents]'"
    ) from error

from ._runner import DurableModel, DurableRunner, approval_key

__all__ = ["DurableModel", "DurableRunner", "approval_key"]
