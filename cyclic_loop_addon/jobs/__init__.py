"""Farm jobs, bpy-free but for the probe: the batch file, the OpenJD template, task files, the scene probe."""
