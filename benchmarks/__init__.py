"""emelex's benchmarks: ``python -m benchmarks`` runs them all and prints one table
(see ``benchmarks/README.md``); each script also runs alone."""
