"""An ordinary offline DSPy program, with no breaker code in it.

DSPy's scripted model asks a ReAct agent to call a tool whose backend is down
five times, then answers "done". It prints one JSON line: how often the tool
body ran, the observations the model read and the final answer.
"""

import json

import dspy
from dspy.utils import DummyLM

BODY_RUNS = [0]


def inventory(x: int) -> str:
    """Looks up the stock of product x."""
    BODY_RUNS[0] += 1
    raise ConnectionError("inventory service unreachable")


def main():
    steps = [{"next_thought": "look", "next_tool_name": "inventory", "next_tool_args": {"x": i}} for i in range(5)]
    steps.append({"next_thought": "finish", "next_tool_name": "finish", "next_tool_args": {}})
    steps.append({"reasoning": "all done", "answer": "done"})
    dspy.configure(lm=DummyLM(steps))
    agent = dspy.ReAct("question -> answer", tools=[inventory], max_iters=8)
    prediction = agent(question="check the stock")
    trajectory = prediction.trajectory
    results = [str(trajectory[key]) for key in sorted(trajectory) if key.startswith("observation_")][:5]
    print(json.dumps({"body_runs": BODY_RUNS[0], "tool_results": results, "final": prediction.answer}))


if __name__ == "__main__":
    main()
