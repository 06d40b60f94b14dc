from s2studio.cli import main

raise SystemExit(main())
