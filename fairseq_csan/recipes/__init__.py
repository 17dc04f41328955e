"""The recipe kit: everything around the plugin that prepares data, trains, evaluates,
translates and analyses, as one importable package installed with it.

Importing the plugin (``--user-dir fairseq_csan``) never imports this package or its
tokeniser dependencies. Each module runs as ``python -m fairseq_csan.recipes.NAME --help``;
the shell recipes in ``scripts/`` and ``examples/`` call these modules and show the fairseq
commands themselves. docs/implementation.md lists which module owns which fact.
"""
