import sys

from episodestream.serving._measure import main

sys.exit(main())
