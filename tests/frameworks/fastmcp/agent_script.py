"""An ordinary offline FastMCP client program, with no breaker code in it.

A scripted model loop calls an in-memory server's tool, whose backend is down,
five times through ``fastmcp.Client.call_tool`` and shows the model each error,
then answers "done". It prints one JSON line: how often the tool body ran, the
tool results the model read and the final answer.
"""

import asyncio
import json
import logging

from fastmcp import Client, FastMCP
from fastmcp.exceptions import ToolError

BODY_RUNS = [0]
server = FastMCP("inventory-server")


@server.tool
def inventory(x: int) -> str:
    """Looks up the stock of product x."""
    BODY_RUNS[0] += 1
    raise ConnectionError("inventory service unreachable")


async def main():
    results = []
    async with Client(server) as client:
        for x in range(5):
            try:
                results.append(str((await client.call_tool("inventory", {"x": x})).data))
            except ToolError as error:
                results.append(str(error))
    print(json.dumps({"body_runs": BODY_RUNS[0], "tool_results": results, "final": "done"}))


if __name__ == "__main__":
    logging.disable(logging.ERROR)
    asyncio.run(main())
