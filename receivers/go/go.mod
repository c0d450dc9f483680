module device-hub/webhooks

go 1.19
