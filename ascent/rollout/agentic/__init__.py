"""Agentic rollouts (GrandCode style): multi-role, multi-turn episodes per problem.

- `transcript`: events, turns, the policy's token threads, the episode.
- `formats`: how roles read and write for a kind of problem (code, arithmetic-as-code in
  `arithmetic`), and the scripted roles; `format_registry` names them.
- `verify`: the sandbox verdicts: attempts, generated tests confirmed by the reference
  solution, the hidden tests.
- `roles`: the trained policy (batched, behaviour log-probs, a weight snapshot) and API roles.
- `episode`: hypothesis -> solve -> generate tests -> verify -> summarize, up to max_turns.
- `producer`: episodes on a background thread, async_workers in flight, bounded staleness.
- `rows`: episodes -> training rows (observation tokens masked out).

The trainer's side is `ascent.train.agentic_source`; credit assignment is
`ascent.algos.agentic`.
"""
