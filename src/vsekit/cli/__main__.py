from vsekit.cli import main

main()
