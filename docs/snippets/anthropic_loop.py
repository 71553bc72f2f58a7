import anthropic

from ctxeng import sdk


def get_weather(city: str) -> str:
    return f"{city}: 18°C, sunny."


client = anthropic.Anthropic()
tools = [{"name": "get_weather", "description": "Current weather in a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
system = "You answer questions about the weather."
messages = [{"role": "user", "content": "What should I wear in Paris and in Oslo today?"}]

session = sdk.Session("chat-agent", model="claude-sonnet-4-5")      # ctxeng
while True:
    step = session.step(messages, tools=tools, system=system)        # ctxeng
    response = client.messages.create(**step.kwargs)                 # ctxeng: was (model=..., max_tokens=..., system=system, messages=messages, tools=tools)
    step.report_usage(response)                                      # ctxeng
    messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in response.content]})
    calls = [block for block in response.content if block.type == "tool_use"]
    if not calls:
        break
    messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": c.id, "content": get_weather(**c.input)} for c in calls]})
print(response.content[0].text)
