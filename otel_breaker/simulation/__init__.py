"""An offline agent session in simulated time: what ``otel-breaker demo`` runs.

A scripted research agent works through questions (search, then fetch, then
answer) while its search tool dies for the middle half of them. Tools "take"
simulated seconds and the breakers read the same clock, so a run is
deterministic and takes milliseconds. The breakers, the guarded call path, the
tool-status block and the menu filter are the library's real ones.

- :mod:`.world`: the clock, the tools and the token estimate of a model turn;
- :mod:`.agent`: the scripted model's policy and the agent loop;
- :mod:`.runs`: the demo's two runs, without and with breakers;
- :mod:`.cases`: the four cases of "what hiding open tools saves";
- :mod:`.upstream_scene`: the second scene, an upstream that refuses connections.

This package computes; ``otel_breaker.cli.demo`` parses options and prints.
"""
