import sys

from refplatform.api.server import main

sys.exit(main())
