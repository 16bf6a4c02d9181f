"""The edge modules as they run on traffic: one file per module, each compiling its
configuration into a hook (``edge/hooks.py``); ``edge/pipeline.py`` puts them in order."""
