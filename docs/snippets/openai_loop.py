import json

import openai

from ctxeng import sdk


def get_weather(city: str) -> str:
    return f"{city}: 18°C, sunny."


client = openai.OpenAI()
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
messages = [{"role": "system", "content": "You answer questions about the weather."},
            {"role": "user", "content": "What should I wear in Paris and in Oslo today?"}]

session = sdk.Session("chat-agent", model="gpt-4o")                # ctxeng
while True:
    step = session.step(messages, tools=tools)                      # ctxeng
    response = client.chat.completions.create(**step.kwargs)        # ctxeng: was (model=..., messages=messages, tools=tools)
    step.report_usage(response)                                     # ctxeng
    reply = response.choices[0].message
    messages.append(reply.model_dump(exclude_none=True))
    if not reply.tool_calls:
        break
    for call in reply.tool_calls:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": get_weather(**json.loads(call.function.arguments))})
print(reply.content)
