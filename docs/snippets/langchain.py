"""The README's "LangChain middleware" snippet, as tests/sdk/test_langchain.py runs it.

The text between the markers is the README's, line for line. `model` and `tools` are the agent's
own: the test gives a scripted chat model and two tools.
"""
# ruff: noqa: F821

# --- README ---
from langchain.agents import create_agent

from ctxeng import sdk
from ctxeng.sdk.langchain import ContextMiddleware

session = sdk.Session("chat-agent", model="gpt-4o")
agent = create_agent(model, tools, middleware=[ContextMiddleware(session)])
result = agent.invoke({"messages": [{"role": "user", "content": "What changed in release 2.1?"}]})
print(result["messages"][-1].response_metadata["ctxeng"])
# --- end README ---
