module example.net/blueprint/guestbook

go 1.22
