"""Red team: policies that must not earn reward, and their player (docs/rewards.md).

:mod:`.policies` holds the reward-hacking policies (``HACKS``), the reference policies (``REFERENCES``)
and :func:`~textsql_clarify.redteam.policies.play`; ``bench/red_team.py`` plays them all.
"""
