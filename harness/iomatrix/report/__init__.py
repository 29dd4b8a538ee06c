"""What people read: text tables, comparison renderers, the progress line, the timeline."""
