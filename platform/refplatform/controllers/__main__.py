import sys

from refplatform.controllers.process import main

sys.exit(main())
