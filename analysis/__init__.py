"""benchback's analysis, behind `python analyze.py`: one module per experiment, plus what they share.

runs      reading run directories and archives
stats     ratios between variants, their spread, the tests of learning parity
envs      the environments alone: step time (complexity) and throughput, cached
output    REPORT.md, the console's tables, the named blocks the docs show, the charts
docs      writing those blocks into README.md and docs/, and finding stale ones
exp1, exp2 (Experiments 2 and 3), cpuenv (with env scaling), learning, findings, headline: one view each
"""
