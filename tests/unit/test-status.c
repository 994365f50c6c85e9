/* test-status.c — every status has a distinct name and a description. */
#include "config.h"

#include <tdm/status.h>

#include "tap.h"

int main(void)
{
    ok(tdm_status_str(TDM_OK) != NULL, "TDM_OK has a description");
    is_str(tdm_status_name(TDM_ERR_INVAL), "TDM_ERR_INVAL", "name of TDM_ERR_INVAL");
    is_str(tdm_status_name((tdm_status_t)-999), "TDM_ERR_UNKNOWN", "out-of-range code is unknown");
    int distinct = 1;
    for (int i = 0; i < TDM_STATUS_COUNT; i++)
        for (int j = i + 1; j < TDM_STATUS_COUNT; j++)
            if (strcmp(tdm_status_name((tdm_status_t)-i), tdm_status_name((tdm_status_t)-j)) == 0)
                distinct = 0;
    ok(distinct, "all %d status names are distinct", TDM_STATUS_COUNT);
    return done_testing();
}
