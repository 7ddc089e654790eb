"""The Loop tab: properties, operators, panel, presets, selection, timeline."""
