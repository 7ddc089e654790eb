"""The artist-facing report, bpy-free: verdict in words, progress in words, the seam picture."""
