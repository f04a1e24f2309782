"""Boxes on the host: settings, lifecycle, the manager, and the link to each box's guest agent."""
