from emelex.cli import main

raise SystemExit(main())
