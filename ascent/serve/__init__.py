"""`ascent serve`: a local policy (a checkpoint or final model) behind an OpenAI-compatible
endpoint, so the evaluation modes, agentic rounds and other tools can call it like an API role.

- `server`: the HTTP server (keys, loopback exposure warnings, request validation);
- `handler`: the HTTP side (body framing and limits, time-outs, clients that hang up);
- `address`: --host and --port checked before the model loads;
- `batching`: concurrent requests gathered into one generate call;
- `wire`: the request and response bodies;
- `local_policy`: a run directory's policy loaded once, with the chat template applied as in
  training.

It sits above training (it loads checkpoints) and below evaluation (which serves a local
policy through it).
"""
