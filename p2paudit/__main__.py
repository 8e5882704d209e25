from p2paudit.cli import main

main()
