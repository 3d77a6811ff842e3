"""python -m scripts.testcluster up|down|status|env (scripts/k8s-cluster.sh runs it)."""

import sys

from .main import main

sys.exit(main())
