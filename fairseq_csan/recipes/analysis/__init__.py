"""The papers' analyses: n-gram gap (CSAN Fig. 3), length buckets and gate weights
(context-aware Figs. 2-5) and the window/area sweep (CSAN Fig. 2)."""
