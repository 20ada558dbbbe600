"""The prefix conda's generated launchers name (#!/opt/anaconda1anaconda2anaconda3/bin/python):
a recipe's build writes $PREFIX there, which rattler-build records as a prefix to replace, and
the packages splitter assembles itself list it as each such file's `prefix_placeholder`.

Its own module, importing nothing: the conda build's worker processes (splitter.targets.conda
.workers) import the assembler, which needs this and no plan or install machinery.
"""

CONDA_PLACEHOLDER = "/opt/anaconda1anaconda2anaconda3"
