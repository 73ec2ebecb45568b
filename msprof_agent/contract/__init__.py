"""The output contract: every file and folder name (``names``), the analysed files' columns and units
(``columns``) and readers (``readers``), the summary's schema (``summary``) and the timelines' time
base (``timebase``).

The analysis and exports write through these modules and ``compare`` and the viewer read through them,
so a file's name and layout are spelled once (a unit test fails on a file-name literal anywhere else).
``names`` is imported by the agent inside the training process: it uses the standard library only.
"""
