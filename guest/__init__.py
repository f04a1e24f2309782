"""The in-box guest agent (import name ``tkbox_guest``): standard library only, PID 1 in the box."""
