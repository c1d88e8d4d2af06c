from attnkit.app.cli import main

main()
