"""The Python SDK for calling a conductor: `session.ConductorSession` sends a
`generate_call.GenerateCall` and yields `events` dataclasses; `model_card` reads
ListModels; `speech` is the streaming speech call over them; `conversation` (messages)
and `session_stream` (core.session_events dataclasses) hold Sessions streams. Importing
any of it loads neither torch nor numpy nor a pipeline."""
