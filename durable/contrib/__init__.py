"""Integrations of `durable` with other libraries, each behind its own extra.

- `durable.contrib.pydantic_ai` (extra ``pydantic-ai``): a Pydantic AI agent
  whose run is a ``@workflow``, each model request and tool call a step.
- `durable.contrib.openai_agents` (extra ``openai-agents``): a drop-in for the
  OpenAI Agents SDK's ``Runner.run`` inside a ``@workflow``.

Nothing here is imported by ``import durable``.
"""
