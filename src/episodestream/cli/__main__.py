import sys

from episodestream.cli import main

sys.exit(main())
