"""The README's "OpenAI Agents filter" snippet, as tests/sdk/test_openai_agents.py runs it.

The text between the markers is the README's, line for line. `agent` is the user's own: the test
gives an `Agent` with a scripted model and two function tools.
"""
# ruff: noqa: F821

# --- README ---
from agents import RunConfig, Runner

from ctxeng import sdk
from ctxeng.sdk.openai_agents import context_filter

session = sdk.Session("chat-agent", model="gpt-4o")
run_config = RunConfig(call_model_input_filter=context_filter(session))
result = Runner.run_sync(agent, "What changed in release 2.1?", run_config=run_config)
print(result.final_output, [step.assembly_id for step in session.steps])
# --- end README ---
