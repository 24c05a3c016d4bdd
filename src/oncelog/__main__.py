from oncelog.cli import main

raise SystemExit(main())
