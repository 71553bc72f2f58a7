"""The README's "recorded to the dashboard" snippet, as tests/service/test_recorded_steps_live.py
runs it against a live server and its worker.

The text between the markers is the README's, line for line. `model` and `tools` are the agent's
own (the test gives langchain-core's fake chat model and a tool); CTXENG_URL and CTXENG_TOKEN name
the service and a token with the agent role in the tenant `acme`.
"""
# ruff: noqa: F821

# --- README ---
import os

from langchain.agents import create_agent

from ctxeng import sdk
from ctxeng.sdk.langchain import ContextMiddleware

session = sdk.Session("chat-agent", model="gpt-4o", principal={"id": "support-bot", "tenant": "acme", "project": "support"},
                      record=sdk.Recorder(os.environ["CTXENG_URL"], os.environ["CTXENG_TOKEN"]))  # the one extra line
agent = create_agent(model, tools, middleware=[ContextMiddleware(session)])
result = agent.invoke({"messages": [{"role": "user", "content": "What changed in release 2.1?"}]})
session.close()  # waits (10 s at most) until every step is sent; what is not stays queued
print(session.record.status)
# --- end README ---
