# ruff: noqa: RUF001  (the CJK samples are full of full-width punctuation, on purpose)
"""A built-in corpus for measuring token estimators, with nothing downloaded.

Prose is hand-written with varied content (BPE merges repeated text unrealistically well, so
nothing here is one phrase pasted many times). Structured samples (JSON tool output, logs,
blobs, tables) come from a seeded ``random.Random`` and are the same on every run.

``CORPUS`` maps a category name to its samples; ``MAIN_CATEGORIES`` are the ones the estimator
must get within bounds of the real tokenizers, the others are reported for information.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable

# --------------------------------------------------------------------------------------------
# English prose

EN_LIGHTHOUSES = """\
For most of the nineteenth century the lighthouse keeper was one of the loneliest figures in
public service. A keeper and his family might live for years on a rock a few hundred yards
across, supplied by a boat that came once a fortnight when the weather allowed it, and often
it did not. The work itself was not heroic in the way the paintings suggest. It was a matter
of routine: trimming wicks, polishing the great lenses until no fingerprint remained, winding
the clockwork that turned the optic, and writing up the log, hour by hour, through the night.

The logs survive in surprising numbers, and they are oddly moving to read. Entries are short
and practical. "Wind NW, fresh. Light burning well. Saw a schooner standing in at 3 a.m."
Occasionally something breaks through the routine: a child born during a gale, a supply boat
that was lost with two men aboard, a keeper who writes that he has not spoken to anyone but
his assistant for nine weeks and that the two of them no longer have much to say.

Technology changed the job slowly and then all at once. The Fresnel lens, introduced in the
1820s, made each light visible much farther out to sea while burning less oil. Kerosene
replaced whale and colza oil, then incandescent mantles replaced open flames, and finally
electricity arrived, usually decades later on the remote stations than on the mainland. Each
change removed a little of the labour. By the middle of the twentieth century an automatic
light could run for months with only an occasional visit from a maintenance crew, and the
lighthouse services began, station by station, to withdraw their keepers.

Many people who grew up on the stations remember the withdrawal with mixed feelings. The
isolation had been real and sometimes dangerous, but so had the sense of purpose. A keeper
knew exactly why the work mattered: somewhere out in the dark there were ships whose crews
were counting the seconds between flashes to work out where they were. When the last keepers
left, the lights kept turning, and the ships kept passing, but nobody was watching them go.

Today a number of the old stations have found new lives as museums, guest houses and bird
observatories. Visitors climb the spiral stairs, look at the brass and glass, and try to
imagine the winters. The view from the gallery is usually the same one the keepers had, and
on a clear evening, when the lamp comes on by itself at dusk, it is easy to understand why
some of them found it hard to leave.
"""

EN_CACHING = """\
When a browser asks a server for a page, it rarely needs every byte to travel across the
network again. HTTP caching is the set of rules that lets a client, or a proxy sitting in
between, reuse a response it has already seen. Getting those rules right makes a site feel
fast; getting them wrong produces the familiar complaint that a fix has been deployed but
users still see the old version.

The simplest mechanism is freshness. A server can say that a response stays fresh for a
given number of seconds, and until that time runs out the cache may hand it back without
asking anyone. This works well for files whose names change whenever their contents do, such
as scripts and stylesheets with a version hash in the file name. Those can be marked fresh
for a year, because a new release simply points to a new name.

For everything else there is validation. When a cached response has gone stale, the cache
does not throw it away; it asks the server whether it is still good. The server compares a
validator, typically an entity tag or a last-modified date, with what it currently has. If
nothing has changed it answers with a short "not modified" status and no body, and the cache
refreshes its copy. The round trip still costs some latency, but the payload is tiny.

A few details cause most of the confusion. Shared caches, like a company proxy or a content
delivery network, must not store responses that belong to one user, so personal pages should
be marked private. Responses that vary by language, encoding or device need to say so, or a
cache may serve a compressed French page to a client that asked for plain English. And the
instruction that sounds like it disables caching does not: it only forces validation before
reuse. To keep a response out of every cache, the server has to say that it must not be
stored at all.

It is worth measuring before and after changing any of this. Most browsers show, for each
request, whether the response came from the network, from memory or from disk, and whether
a validation request was made. Half an hour spent reading those columns on a slow connection
usually teaches more about a site's real behaviour than a week of reading specifications.
"""

EN_SUPPORT = """\
Hi Martina,

Thanks for getting back to me so quickly, and apologies for the long message. I wanted to
put everything in one place so that whoever picks this up next week does not have to read
the whole thread from the beginning.

Here is where we are. The replacement unit arrived on Tuesday, two days later than the
tracking page promised, but in good condition. The technician from your partner company came
on Thursday morning and installed it without any trouble. He was friendly and careful, and
he took the old unit away with him, which we appreciated. For about a day everything worked
as it should.

On Friday afternoon the same fault came back. The display flickers for a few seconds, the
fan speeds up, and then the whole thing restarts. It happens roughly every forty minutes, a
little more often when the room is warm. We have tried the steps in the troubleshooting
guide: we reset it to factory settings, moved it away from the window, and plugged it into
a different socket on another circuit. None of that made a difference.

Since this is the second unit with the identical problem, I am starting to wonder whether
the cause is something in our setup rather than the hardware itself. Our building had some
electrical work done in the spring, and one of the other tenants mentioned that their coffee
machine has been behaving strangely since then. I do not want to blame the electricians
without evidence, but it would help to know whether your engineers have seen this pattern
before, and whether there is a log we could send you.

Could you let me know what you need from us? We are happy to run a test, send photos of the
wiring, or arrange a time for someone to visit. If it turns out the problem is on our side,
we will of course cover the cost of the visit. We would just like to get to the bottom of it
before the busy season starts in October.

Best regards,
Daniel
"""

# --------------------------------------------------------------------------------------------
# Chinese prose

ZH_BOOKSHOP = """\
我家附近原来有一家旧书店，开在一条老街的拐角处，门面不大，招牌上的字已经褪了色。店主姓周，
六十多岁，头发花白，总是戴着一副老花镜坐在柜台后面看书。第一次走进去的时候，我以为里面会很乱，
没想到书架收拾得整整齐齐，文学、历史、哲学、医学分得清清楚楚，连过期的杂志都按年份捆好放在角落里。

周老板不太爱说话，但只要问起某一本书，他就像换了一个人。他能说出这本书是哪一年出版的，哪个版本
印得最好，译者后来又翻译了什么作品。有一次我想找一本七十年代出版的植物图谱，他想了一会儿，
从最里面的书架顶上搬下一个纸箱，翻了十几分钟，居然真的找到了。书的封面有些破损，内页却保存得很好，
他只收了我十五块钱，还说这本书放在他这里也是浪费，不如让喜欢它的人带走。

后来我常常在周末去那里坐一坐。店里没有空调，夏天靠一台旧电风扇，冬天靠一个小电暖器。来买书的
人并不多，大多是附近的退休老师和几个大学生，偶尔也有外地人专门找过来，说是在网上看到有人推荐。
周老板从来不在网上卖书，他觉得书要拿在手里翻过才知道值不值得买，隔着屏幕看照片是看不出来的。

去年春天，老街开始改造，很多店铺都搬走了。我问他有什么打算，他说房东已经通知他年底之前必须
腾出房子，新的租金他付不起，也不想再换地方了。最后一个月，他把大部分书按斤卖给了回收站，
留下几百本自己舍不得的，送给了常来的几位老顾客。我分到了一套旧版的《史记》和那本植物图谱的
另一个版本，扉页上有他用钢笔写的一句话：“书比人走得远。”

现在那个拐角开了一家连锁咖啡店，装修得很漂亮，每天都坐满了年轻人。我路过的时候偶尔会想起那间
昏暗的小店，想起电风扇转动的声音和旧纸张特有的气味。城市总是在变化，这本身没有什么不好，
只是有些东西一旦消失，就再也找不回来了。
"""

ZH_DATABASE = """\
数据库索引是提高查询速度最常用的手段之一，但很多开发者对它的理解只停留在“加了索引就会变快”
这个层面。要真正用好索引，需要先弄清楚它在磁盘上是怎样组织的，以及查询优化器在什么情况下会选择它。

目前主流的关系型数据库大多使用B+树作为索引结构。B+树的特点是所有数据都存放在叶子节点上，
叶子节点之间用指针连成一个有序链表，而非叶子节点只保存用于导航的键值。由于每个节点的大小通常
等于一个磁盘页，一棵三到四层的B+树就可以容纳上千万条记录，查找任意一条记录只需要读取几个页面。
这也是为什么在大表上按主键查询几乎总是很快的原因。

索引并不是越多越好。每一次插入、更新或删除数据，数据库都要同步维护相关的索引，索引越多，
写入的代价就越高。此外，索引本身也要占用存储空间，在某些业务表上，索引的体积甚至会超过数据本身。
因此，在设计表结构时，应该根据实际的查询模式来决定建立哪些索引，而不是给每个字段都加上一个。

联合索引的字段顺序非常关键。假设在订单表上建立了一个由用户编号、订单状态和创建时间组成的联合索引，
那么按用户编号查询，或者按用户编号加订单状态查询，都可以利用这个索引；但如果只按订单状态查询，
索引就基本派不上用场。这就是常说的最左前缀原则。另外，在索引列上使用函数或者进行隐式类型转换，
也会导致优化器放弃索引，转而进行全表扫描，这类问题在线上环境中尤其常见，而且不容易被发现。

判断一条语句是否用到了索引，最直接的办法是查看执行计划。执行计划会告诉我们优化器选择了哪个索引、
预计扫描多少行、是否需要额外的排序或者临时表。养成在上线前检查执行计划的习惯，可以避免很多
性能事故。当然，统计信息过期也可能让优化器做出错误的判断，这时需要手动更新统计信息，
或者在必要的时候使用索引提示来引导它。
"""

ZH_TEA = """\
每年清明前后，是江南茶区最忙碌的时候。天刚蒙蒙亮，山坡上就已经有采茶的人了。她们背着竹篓，
手指在茶树顶端轻轻一掐，一芽一叶便落进掌心。熟练的采茶工一天能采两三斤鲜叶，听起来不多，
可要做出一斤干茶，往往需要四斤左右的鲜叶，而且必须当天采摘、当天加工，否则香气就会大打折扣。

村里的老茶农告诉我，好茶三分靠种，七分靠做。鲜叶采回来以后，先要摊放几个小时，让水分散发一部分，
然后才能下锅杀青。炒茶的铁锅要烧到两百多度，全凭手感控制火候，手掌贴着滚烫的茶叶不停地翻、抖、压、磨，
一锅茶要炒二十多分钟。他说年轻的时候手上经常烫出水泡，练了好几年才敢一个人掌锅。如今不少茶厂已经
用上了机器，效率高了很多，但他坚持认为，最好的那几锅茶还是得用手炒。

这几年，茶叶的销售方式也发生了很大的变化。以前茶农只能把茶卖给上门收购的茶商，价格由别人说了算。
现在很多年轻人回到村里，开网店、做直播，把自家的茶直接卖给全国各地的消费者。一位九零后的返乡青年
对我说，他刚开始直播的时候，每天只有几十个人观看，后来他把镜头对准了凌晨采茶和炒茶的全过程，
观众反而越来越多。大家愿意为真实的东西买单。

当然，问题也随之而来。有的商家为了抢占市场，把普通的茶叶包装成名贵的品种高价出售，损害了整个
产区的声誉。当地政府因此建立了产地溯源系统，每一批茶叶都有编号，消费者扫一扫包装上的二维码，
就能看到茶园的位置、采摘的日期和加工的记录。茶农们普遍认为这是好事，因为只有守住了品质，
这片山上的茶才能一直卖下去。
"""

# --------------------------------------------------------------------------------------------
# Japanese, Korean, Russian, other European

JA_TRAIN = """\
先週の金曜日、久しぶりに各駅停車の電車に乗って、海沿いの小さな町まで出かけた。特急を使えば一時間ほどで
着くところを、わざわざ三時間近くかけて行ったのは、途中の景色をゆっくり眺めたかったからだ。朝七時過ぎの
電車は通勤客で少し混んでいたが、大きな駅をいくつか過ぎると車内は急に静かになり、窓の外には田んぼと
低い山が広がり始めた。

途中の駅では、地元の高校生が何人も乗ってきた。部活の道具を抱えた子、単語帳をめくっている子、友達と
小声で笑い合っている子。彼らにとっては毎日の見慣れた風景なのだろうが、私にはそのすべてが新鮮に見えた。
ある無人駅では、ホームの端に小さな花壇があり、手書きの札に「ご自由にお持ちください」と書かれていた。
誰が世話をしているのかは分からないが、こういう心遣いに触れると、知らない町でも少しだけ親しみが湧く。

目的地の町に着いたのは昼前だった。駅前の食堂で焼き魚の定食を頼むと、店のおばあさんが「今朝あがった
ばかりだよ」と教えてくれた。午後は港のまわりを歩き、古い灯台まで足を延ばした。帰りの電車の中で、
次はもっと季節が進んでから、また同じ路線に乗ってみようと思った。
"""

JA_BUSINESS = """\
お世話になっております。株式会社ミナトシステムの佐藤です。

先日はお忙しいところ、打ち合わせのお時間をいただきありがとうございました。当日ご説明した新しい在庫管理
システムの導入スケジュールについて、社内で検討した結果をご報告いたします。

まず、第一段階として来月中旬から倉庫二か所でテスト運用を開始したいと考えております。テスト期間は約六週間を
予定しており、その間は既存のシステムと並行して稼働させますので、現場の業務に大きな影響は出ない見込みです。
第二段階では、テスト結果を踏まえて必要な修正を行ったうえで、残りの拠点へ順次展開いたします。

なお、打ち合わせの際にご質問いただいたデータ移行の件ですが、過去三年分の入出庫履歴はすべて新システムへ
移行可能です。ただし、一部の古い商品コードについては形式が異なるため、事前に変換作業が必要となります。
対象となる件数や作業の手順については、来週中に詳細な資料をお送りいたします。

ご不明な点やご要望がございましたら、お気軽にお問い合わせください。引き続きどうぞよろしくお願いいたします。
"""

KO_MARKET = """\
우리 동네에는 오래된 전통 시장이 하나 있다. 큰 마트가 생긴 뒤로 손님이 많이 줄었다고는 하지만, 주말 아침이
되면 여전히 사람들로 북적인다. 입구에 들어서면 가장 먼저 떡집에서 풍기는 고소한 냄새가 반겨 주고, 조금 더
걸어가면 생선 가게 주인아저씨가 큰 목소리로 오늘 들어온 물건을 자랑한다.

나는 어릴 때부터 어머니를 따라 이 시장에 다녔다. 그때는 시장이 세상에서 제일 큰 곳처럼 느껴졌다. 어머니는
단골 채소 가게에서 늘 덤을 받으셨고, 나는 그 옆 분식집에서 떡볶이를 얻어먹는 재미로 따라다녔다. 지금은 그
분식집 자리에 작은 카페가 들어섰지만, 채소 가게 할머니는 아직도 같은 자리에서 장사를 하신다. 얼마 전에
인사를 드렸더니 나를 알아보시고는 벌써 이렇게 컸냐며 웃으셨다.

최근에는 시장에도 변화가 생기고 있다. 젊은 상인들이 들어와 수제 반찬이나 빵을 팔기 시작했고, 몇몇 가게는
온라인 주문과 배달도 받는다. 시장 상인회에서는 매달 마지막 주 토요일에 작은 공연도 연다. 오래된 것과 새로운
것이 섞여 있는 모습이 처음에는 조금 어색했지만, 지금은 오히려 그런 분위기가 이 시장의 매력이라고 생각한다.
"""

KO_TECH = """\
이번 업데이트에서는 검색 서비스의 응답 속도를 개선하는 데 집중했습니다. 기존에는 사용자가 검색어를 입력할
때마다 전체 색인을 조회했기 때문에, 데이터가 늘어날수록 응답 시간이 점점 길어지는 문제가 있었습니다. 특히
오후 시간대처럼 요청이 몰리는 구간에서는 일부 요청이 제한 시간을 넘겨 실패하기도 했습니다.

이를 해결하기 위해 자주 검색되는 결과를 메모리에 보관하는 캐시 계층을 추가했고, 색인을 지역별로 나누어
필요한 부분만 조회하도록 구조를 변경했습니다. 또한 검색어 자동 완성 기능은 별도의 경량 서버로 분리하여 본
검색 서버의 부담을 줄였습니다. 내부 테스트 결과, 평균 응답 시간은 기존 대비 약 절반 수준으로 줄었고, 가장
느린 요청의 응답 시간도 크게 개선되었습니다.

다만 캐시를 도입하면서 새로 등록된 상품이 검색 결과에 반영되기까지 최대 몇 분의 지연이 생길 수 있습니다.
판매자분들께서는 상품 등록 직후 검색 결과에 바로 나타나지 않더라도 잠시 기다려 주시기 바랍니다. 관련하여
불편 사항이나 문의가 있으시면 고객 센터로 연락해 주세요.
"""

RU_RIVER = """\
Городок стоит на высоком берегу реки, и почти из любого окна видна вода. Летом по ней ходят
небольшие теплоходы с туристами, а по утрам рыбаки на лодках неподвижно сидят у противоположного
берега, будто нарисованные. Зимой река замерзает, и местные жители ходят по льду напрямик в соседнюю
деревню, хотя каждый год кто-нибудь рассказывает историю о том, как лёд треснул под чьими-то санями.

В центре сохранилось несколько купеческих домов девятнадцатого века с резными наличниками. Один из
них недавно отреставрировали, и теперь там краеведческий музей. Экспозиция небольшая, но подобрана
с любовью: старые фотографии пристани, вывески лавок, детские игрушки, письма, которые отправляли с
фронта. Смотрительница музея, пожилая учительница на пенсии, может часами рассказывать о каждой
вещи и о людях, которым она когда-то принадлежала.

Молодёжь, конечно, уезжает учиться и работать в большие города. Но в последние годы некоторые стали
возвращаться: кто-то открыл гостевой дом, кто-то маленькую пекарню, кто-то работает удалённо и говорит,
что тишина и вид на реку стоят того, чтобы раз в месяц ездить в столицу. Городок медленно меняется, но
по-прежнему просыпается под крики чаек и звон колокола на старой церкви.
"""

RU_TECH = """\
В новой версии сервиса мы изменили способ хранения пользовательских сессий. Раньше каждая сессия
записывалась в основную базу данных, и при большой нагрузке это приводило к заметным задержкам:
запросы на чтение профиля ждали, пока завершатся операции записи. Теперь сессии хранятся в отдельном
хранилище в оперативной памяти с автоматическим удалением устаревших записей.

Переход прошёл в три этапа. Сначала новая система работала в режиме теневой записи, то есть данные
сохранялись в оба места, но читались только из старого. Затем мы переключили чтение на новое
хранилище для небольшой доли пользователей и в течение недели сравнивали показатели. Когда стало ясно,
что ошибок нет, а время ответа сократилось почти вдвое, переключение выполнили для всех.

Если после обновления вы заметили, что вас неожиданно разлогинило, просто войдите в систему снова.
Такое могло произойти один раз во время переключения. Если проблема повторяется, пожалуйста,
напишите в службу поддержки и укажите примерное время, когда это случилось.
"""

EU_MIXED = """\
La petite librairie de la rue des Carmes a rouvert ses portes après trois mois de travaux. Les
étagères en chêne ont été restaurées, l'éclairage a été refait, et un coin café permet désormais
de feuilleter les nouveautés en buvant un thé. « Nous voulions garder l'âme du lieu », explique la
propriétaire, qui a hérité de la boutique de sa grand-mère.

Die Stadtbibliothek verlängert ab nächster Woche ihre Öffnungszeiten. Von Montag bis Freitag ist
sie künftig bis 21 Uhr geöffnet, am Samstag bis 18 Uhr. Außerdem wird im Erdgeschoss ein neuer
Lesesaal für Schülerinnen und Schüler eingerichtet, die zu Hause keinen ruhigen Arbeitsplatz haben.

El mercado municipal celebrará este sábado su tradicional feria de otoño. Habrá puestos de quesos
artesanales, miel, setas y productos de la huerta, además de talleres de cocina para niños. Los
organizadores recomiendan llegar temprano, porque el año pasado las castañas asadas se agotaron
antes del mediodía.
"""

EU_TRAVEL = """\
Il treno regionale per Bolzano parte ogni ora dalla stazione centrale. Il viaggio dura poco più
di due ore e attraversa vigneti, castelli e piccoli paesi di montagna. Conviene sedersi sul lato
destro: dopo Trento la valle si stringe e la vista sulle Dolomiti è spettacolare, soprattutto al
tramonto. I biglietti si comprano anche a bordo, ma costano qualche euro in più.

A praia de Matosinhos fica a vinte minutos do centro do Porto de metro. No verão a água é fria,
mesmo em agosto, mas isso não impede as famílias de passarem o dia inteiro na areia. Ao fim da
tarde, os restaurantes da rua principal grelham sardinhas e robalo à porta, e o cheiro chega até
à estação. Não é preciso reservar, mas convém chegar antes das oito.

Kraków najlepiej zwiedzać pieszo. Z Rynku Głównego można w kwadrans dojść na Wawel, a stamtąd
spacerem wzdłuż Wisły na Kazimierz, gdzie wieczorem otwierają się małe kawiarnie i księgarnie.
W zimie warto ciepło się ubrać, bo wiatr od rzeki potrafi być przenikliwy, a dni są krótkie.

Am Wochenende lohnt sich ein Ausflug an den Bodensee. Mit dem Fahrrad kann man in zwei Tagen
gemütlich von Konstanz nach Lindau fahren, übernachtet unterwegs in einer kleinen Pension und
probiert abends Felchen aus dem See. Wer es eilig hat, nimmt für die Rückfahrt die Fähre.
"""

# --------------------------------------------------------------------------------------------
# Source code

PY_MODULE = '''\
"""Rate limiting for the public API, one token bucket per client key."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Bucket:
    capacity: float
    refill_per_second: float
    tokens: float = field(init=False)
    updated_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = self.capacity
        self.updated_at = time.monotonic()

    def take(self, cost: float = 1.0, *, now: float | None = None) -> bool:
        """Spend ``cost`` tokens if the bucket holds them; return whether it did."""
        now = time.monotonic() if now is None else now
        elapsed = max(0.0, now - self.updated_at)
        self.tokens = min(self.capacity, self.tokens + elapsed * self.refill_per_second)
        self.updated_at = now
        if self.tokens < cost:
            return False
        self.tokens -= cost
        return True

    def seconds_until(self, cost: float = 1.0) -> float:
        missing = cost - self.tokens
        return 0.0 if missing <= 0 else missing / self.refill_per_second


class RateLimiter:
    def __init__(
        self,
        capacity: float,
        refill_per_second: float,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        if capacity <= 0 or refill_per_second <= 0:
            raise ValueError("capacity and refill_per_second must be positive")
        self._capacity = capacity
        self._refill = refill_per_second
        self._clock = clock
        self._max_clients = max_clients
        self._buckets: dict[str, Bucket] = {}
        self._lock = threading.Lock()

    def allow(self, client_key: str, cost: float = 1.0) -> tuple[bool, float]:
        with self._lock:
            bucket = self._buckets.get(client_key)
            if bucket is None:
                if len(self._buckets) >= self._max_clients:
                    self._evict_idle()
                bucket = self._buckets[client_key] = Bucket(self._capacity, self._refill)
            allowed = bucket.take(cost, now=self._clock())
            return allowed, 0.0 if allowed else bucket.seconds_until(cost)

    def _evict_idle(self) -> None:
        now = self._clock()
        idle = [key for key, b in self._buckets.items() if now - b.updated_at > 300]
        for key in idle or list(self._buckets)[: len(self._buckets) // 10 + 1]:
            del self._buckets[key]


def retry_after_header(seconds: float) -> dict[str, str]:
    # Clients round down; never tell them zero while they are still limited.
    return {"Retry-After": str(max(1, int(seconds + 0.999)))}
'''

PY_SCRIPT = '''\
#!/usr/bin/env python3
"""Summarise a CSV export of shop orders: revenue per month and the top products."""

import argparse
import csv
import sys
from collections import Counter, defaultdict
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("csv_path", type=Path, help="orders export from the admin panel")
    parser.add_argument("--top", type=int, default=10, help="how many products to list")
    parser.add_argument("--currency", default="EUR")
    parser.add_argument("--skip-refunded", action="store_true")
    return parser.parse_args(argv)


def read_orders(path, skip_refunded=False):
    with path.open(newline="", encoding="utf-8-sig") as handle:
        for line_no, row in enumerate(csv.DictReader(handle), start=2):
            if skip_refunded and row.get("status", "").lower() == "refunded":
                continue
            try:
                created = datetime.strptime(row["created_at"][:19], "%Y-%m-%d %H:%M:%S")
                total = Decimal(row["total"].replace(",", "."))
            except (KeyError, ValueError, InvalidOperation) as exc:
                print(f"line {line_no}: skipped ({exc})", file=sys.stderr)
                continue
            yield created, total, row.get("product_name", "?"), int(row.get("quantity") or 1)


def main(argv=None):
    args = parse_args(argv)
    if not args.csv_path.exists():
        sys.exit(f"no such file: {args.csv_path}")

    revenue = defaultdict(Decimal)
    units = Counter()
    for created, total, product, quantity in read_orders(args.csv_path, args.skip_refunded):
        revenue[created.strftime("%Y-%m")] += total
        units[product] += quantity

    print(f"Revenue per month ({args.currency})")
    for month in sorted(revenue):
        bar = "#" * int(revenue[month] / 500)
        print(f"  {month}  {revenue[month]:>12,.2f}  {bar}")

    print()
    print(f"Top {args.top} products by units sold")
    for rank, (product, count) in enumerate(units.most_common(args.top), start=1):
        print(f"  {rank:>2}. {product[:48]:<48} {count:>6}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''

JS_SERVER = """\
'use strict';

const express = require('express');
const { Pool } = require('pg');
const crypto = require('node:crypto');

const app = express();
const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
const PAGE_SIZE = 25;

app.use(express.json({ limit: '1mb' }));

app.use((req, res, next) => {
  req.id = req.get('x-request-id') || crypto.randomUUID();
  res.set('x-request-id', req.id);
  const started = process.hrtime.bigint();
  res.on('finish', () => {
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    console.log(`${req.id} ${req.method} ${req.originalUrl} ${res.statusCode} ${ms.toFixed(1)}ms`);
  });
  next();
});

app.get('/api/products', async (req, res, next) => {
  try {
    const page = Math.max(1, parseInt(req.query.page, 10) || 1);
    const search = (req.query.q || '').trim();
    const params = [PAGE_SIZE, (page - 1) * PAGE_SIZE];
    let where = '';
    if (search) {
      params.push(`%${search}%`);
      where = `WHERE name ILIKE $${params.length} OR sku ILIKE $${params.length}`;
    }
    const { rows } = await pool.query(
      `SELECT id, sku, name, price_cents, stock FROM products ${where} ORDER BY id LIMIT $1 OFFSET $2`,
      params,
    );
    res.json({ page, items: rows.map(toProduct), hasMore: rows.length === PAGE_SIZE });
  } catch (err) {
    next(err);
  }
});

app.post('/api/cart/:cartId/items', async (req, res, next) => {
  const { productId, quantity = 1 } = req.body ?? {};
  if (!Number.isInteger(productId) || quantity < 1 || quantity > 99) {
    return res.status(400).json({ error: 'productId must be an integer and quantity 1-99' });
  }
  try {
    const result = await pool.query(
      'INSERT INTO cart_items (cart_id, product_id, quantity) VALUES ($1, $2, $3) ' +
        'ON CONFLICT (cart_id, product_id) DO UPDATE SET quantity = cart_items.quantity + $3 RETURNING *',
      [req.params.cartId, productId, quantity],
    );
    res.status(201).json(result.rows[0]);
  } catch (err) {
    next(err);
  }
});

function toProduct(row) {
  return {
    id: row.id,
    sku: row.sku,
    name: row.name,
    price: (row.price_cents / 100).toFixed(2),
    inStock: row.stock > 0,
  };
}

app.use((err, req, res, _next) => {
  console.error(`${req.id} unhandled error`, err);
  res.status(500).json({ error: 'internal error', requestId: req.id });
});

app.listen(process.env.PORT || 3000, () => console.log('listening'));
"""

TS_COMPONENT = """\
import { useEffect, useMemo, useState } from 'react';
import type { Order, OrderStatus } from '../api/types';
import { fetchOrders } from '../api/orders';
import { formatMoney, formatDate } from '../lib/format';

interface OrderTableProps {
  customerId: string;
  initialStatus?: OrderStatus | 'all';
  onSelect?: (order: Order) => void;
}

const STATUS_LABELS: Record<OrderStatus, string> = {
  pending: 'Pending',
  paid: 'Paid',
  shipped: 'Shipped',
  delivered: 'Delivered',
  cancelled: 'Cancelled',
};

export function OrderTable({ customerId, initialStatus = 'all', onSelect }: OrderTableProps) {
  const [orders, setOrders] = useState<Order[]>([]);
  const [status, setStatus] = useState<OrderStatus | 'all'>(initialStatus);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);

  useEffect(() => {
    const controller = new AbortController();
    setLoading(true);
    fetchOrders(customerId, { signal: controller.signal })
      .then((data) => {
        setOrders(data);
        setError(null);
      })
      .catch((err: unknown) => {
        if (!controller.signal.aborted) {
          setError(err instanceof Error ? err.message : String(err));
        }
      })
      .finally(() => setLoading(false));
    return () => controller.abort();
  }, [customerId]);

  const visible = useMemo(
    () => (status === 'all' ? orders : orders.filter((o) => o.status === status)),
    [orders, status],
  );
  const total = visible.reduce((sum, o) => sum + o.totalCents, 0);

  if (loading) return <p className="muted">Loading orders…</p>;
  if (error) return <p role="alert">Could not load orders: {error}</p>;

  return (
    <section>
      <label>
        Status{' '}
        <select value={status} onChange={(e) => setStatus(e.target.value as OrderStatus | 'all')}>
          <option value="all">All</option>
          {Object.entries(STATUS_LABELS).map(([value, label]) => (
            <option key={value} value={value}>
              {label}
            </option>
          ))}
        </select>
      </label>
      <table>
        <thead>
          <tr>
            <th>Order</th>
            <th>Date</th>
            <th>Status</th>
            <th className="num">Total</th>
          </tr>
        </thead>
        <tbody>
          {visible.map((order) => (
            <tr key={order.id} onClick={() => onSelect?.(order)}>
              <td>{order.number}</td>
              <td>{formatDate(order.createdAt)}</td>
              <td>{STATUS_LABELS[order.status]}</td>
              <td className="num">{formatMoney(order.totalCents, order.currency)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <p className="summary">
        {visible.length} orders, {formatMoney(total, visible[0]?.currency ?? 'EUR')} in total
      </p>
    </section>
  );
}
"""

GO_WORKER = """\
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Job is one unit of work pulled from the queue.
type Job struct {
	ID       string
	Kind     string
	Payload  []byte
	Attempts int
}

// Handler processes a job; returning ErrRetry puts it back on the queue with a delay.
type Handler func(ctx context.Context, job Job) error

var ErrRetry = errors.New("retry later")

type Queue interface {
	Pop(ctx context.Context) (Job, error)
	Ack(ctx context.Context, id string) error
	Requeue(ctx context.Context, job Job, delay time.Duration) error
}

type Pool struct {
	queue       Queue
	handlers    map[string]Handler
	concurrency int
	maxAttempts int
	logger      *slog.Logger
}

func NewPool(q Queue, concurrency int, logger *slog.Logger) *Pool {
	return &Pool{
		queue:       q,
		handlers:    map[string]Handler{},
		concurrency: concurrency,
		maxAttempts: 5,
		logger:      logger,
	}
}

func (p *Pool) Handle(kind string, h Handler) { p.handlers[kind] = h }

func (p *Pool) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, p.concurrency)
	for i := 0; i < p.concurrency; i++ {
		wg.Add(1)
		go func(worker int) {
			defer wg.Done()
			for {
				job, err := p.queue.Pop(ctx)
				if err != nil {
					if ctx.Err() == nil {
						errs <- fmt.Errorf("worker %d: pop: %w", worker, err)
					}
					return
				}
				p.process(ctx, job)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	return errors.Join(drain(errs)...)
}

func (p *Pool) process(ctx context.Context, job Job) {
	h, ok := p.handlers[job.Kind]
	if !ok {
		p.logger.Warn("no handler", "kind", job.Kind, "id", job.ID)
		_ = p.queue.Ack(ctx, job.ID)
		return
	}
	started := time.Now()
	err := h(ctx, job)
	switch {
	case err == nil:
		_ = p.queue.Ack(ctx, job.ID)
		p.logger.Info("done", "id", job.ID, "took", time.Since(started))
	case errors.Is(err, ErrRetry) && job.Attempts+1 < p.maxAttempts:
		job.Attempts++
		delay := time.Duration(1<<job.Attempts) * time.Second
		_ = p.queue.Requeue(ctx, job, delay)
	default:
		p.logger.Error("failed", "id", job.ID, "attempts", job.Attempts+1, "err", err)
		_ = p.queue.Ack(ctx, job.ID)
	}
}

func drain(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}
"""

# --------------------------------------------------------------------------------------------
# Mixed English/Chinese chat, emoji, whitespace-heavy

MIXED_CHAT = """\
user: 帮我看一下这个报错，部署到 staging 之后 API 一直返回 502，本地跑是好的。
assistant: 502 一般说明网关（比如 Nginx 或者 load balancer）连不上后端服务。可以先确认三件事：
1. 容器有没有正常启动，`kubectl get pods -n staging` 看一下状态是不是 Running；
2. 服务监听的端口和 Service 里配置的 targetPort 是否一致；
3. health check 的路径是不是返回 200。
user: pod 是 Running 的，但是 restarts 有 14 次。logs 里最后一行是 OOMKilled。
assistant: 那基本可以确定是内存不够被 kill 掉了。OOMKilled 说明容器用的内存超过了 limits 里设置的值。
你们现在的 memory limit 是多少？如果是 256Mi，对 Node.js 服务来说偏小，尤其是启动时要加载比较大的依赖。
建议先把 limit 调到 512Mi 观察一下，同时在启动参数里加上 `--max-old-space-size=384`，
让 V8 的堆大小和容器的限制对应起来，不然 GC 不知道自己快到上限了。
user: 改成 512Mi 之后不重启了，但是高峰期 latency 还是很高，p99 大概 2.3 秒。
assistant: 这就是另一个问题了。可以先看看慢在哪里：如果是数据库查询，打开 slow query log；
如果是外部接口，比如支付或者短信服务，可以加上 timeout 和 retry，避免一个慢请求拖住整个 event loop。
另外 p99 高但 p50 正常的话，很可能是少数几个大请求，比如导出报表，可以考虑放到后台任务里异步处理。
user: 好的，我先加一下 tracing，看看具体是哪个 span 慢。谢谢！
"""

EMOJI_CHAT = """\
Happy Friday team!! 🎉🎉 Quick recap of the week before everyone disappears 😄

✅ Checkout redesign shipped to 100% of users, conversion is up 3.2% so far 📈
✅ The flaky payment test is finally fixed (thanks Priya!! 🙏)
⚠️ Search latency spiked on Wednesday, root cause was a missing index, now resolved 🔧
❌ The mobile release slipped to next Tuesday 😬 Apple review is being slow again 🍎⏳

Reminders:
👉 Offsite is on the 14th, please fill in the lunch form 🥗🍕🌮
👉 Laptop refresh: if you have a 2019 model, ping IT 💻
👉 Don't forget to submit expenses before month end 💸🧾

Shout-outs 🌟: Marco for debugging the queue at 2am 🦉, Lena for the amazing onboarding docs 📚,
and everyone who answered customer tickets during the outage 💪❤️

Have a great weekend ☀️🏖️ See you Monday 👋😊
"""

WHITESPACE_TABLE = """\
+------------+----------------------------+----------+------------+-------------+
| id         | name                       | status   |   requests |   p95 (ms)  |
+------------+----------------------------+----------+------------+-------------+
| svc-001    | checkout                   | healthy  |     182391 |        84.2 |
| svc-002    | payments                   | degraded |      93812 |       412.9 |
| svc-003    | search                     | healthy  |     771203 |        61.0 |
| svc-004    | recommendations            | healthy  |     402118 |       133.7 |
| svc-005    | inventory                  | healthy  |      51027 |        22.4 |
| svc-006    | notifications              | down     |          0 |           - |
| svc-007    | user-profile               | healthy  |     240981 |        18.9 |
| svc-008    | shipping-rates             | healthy  |      12830 |       302.5 |
+------------+----------------------------+----------+------------+-------------+


        Summary
        -------

            services:        8
            healthy:         6
            degraded:        1
            down:            1


                                                      generated  2024-06-03  09:12


config:
    server:
        listen:          0.0.0.0:8080
        read_timeout:    30s
        write_timeout:   30s
        limits:
            max_body:        10MB
            max_headers:     64KB
    upstreams:
        -   name:        primary
            url:         http://10.0.4.17:9000
            weight:      80
        -   name:        fallback
            url:         http://10.0.4.18:9000
            weight:      20
"""


# --------------------------------------------------------------------------------------------
# Generated structured samples

_WORDS = [
    "wireless",
    "ergonomic",
    "stainless",
    "compact",
    "portable",
    "premium",
    "organic",
    "waterproof",
    "adjustable",
    "rechargeable",
    "lightweight",
    "heavy-duty",
    "foldable",
    "vintage",
    "smart",
    "bamboo",
    "ceramic",
    "leather",
    "cotton",
    "aluminum",
    "insulated",
    "magnetic",
    "modular",
]
_NOUNS = [
    "keyboard",
    "mouse",
    "bottle",
    "backpack",
    "lamp",
    "kettle",
    "headphones",
    "charger",
    "jacket",
    "blender",
    "desk",
    "chair",
    "mug",
    "tent",
    "speaker",
    "monitor",
    "cable",
    "wallet",
    "notebook",
    "thermos",
    "pan",
    "drill",
    "umbrella",
]
_CITIES = [
    "Berlin",
    "Lyon",
    "Porto",
    "Austin",
    "Osaka",
    "Toronto",
    "Leeds",
    "Gdansk",
    "Bologna",
    "Denver",
    "Valencia",
    "Utrecht",
]
_STATUSES = ["pending", "paid", "shipped", "delivered", "cancelled", "refunded"]
_CARRIERS = ["DHL", "UPS", "FedEx", "GLS", "DPD", "PostNL"]


def _iso(rng: random.Random) -> str:
    return (
        f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
    )


def _ident(rng: random.Random, prefix: str, n: int) -> str:
    return prefix + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(n))


def json_orders(seed: int = 1, count: int = 6) -> str:
    """An order-lookup tool result: ids, prices, quantities, timestamps, nested items."""
    rng = random.Random(seed)
    orders = []
    for _ in range(count):
        items = []
        subtotal = 0.0
        for _ in range(rng.randint(1, 4)):
            price = round(rng.uniform(3, 400), 2)
            qty = rng.randint(1, 5)
            subtotal += round(price * qty, 2)
            items.append(
                {
                    "sku": f"SKU-{rng.randint(10000, 99999)}-{rng.choice(['BLK', 'WHT', 'RED', 'BLU'])}",
                    "name": f"{rng.choice(_WORDS).title()} {rng.choice(_NOUNS)}",
                    "quantity": qty,
                    "unit_price": price,
                    "line_total": round(price * qty, 2),
                }
            )
        subtotal = round(subtotal, 2)
        shipping = rng.choice([0, 4.99, 9.9, 14.5])
        orders.append(
            {
                "order_id": _ident(rng, "ord_", 10),
                "customer_id": rng.randint(100000, 999999),
                "status": rng.choice(_STATUSES),
                "created_at": _iso(rng),
                "currency": "EUR",
                "items": items,
                "subtotal": subtotal,
                "shipping": shipping,
                "tax": round(subtotal * 0.19, 2),
                "total": round(subtotal * 1.19 + shipping, 2),
                "shipment": {
                    "carrier": rng.choice(_CARRIERS),
                    "tracking": "".join(rng.choice("0123456789") for _ in range(14)),
                    "eta": _iso(rng)[:10],
                    "city": rng.choice(_CITIES),
                    "postcode": f"{rng.randint(1000, 99999):05d}",
                },
            }
        )
    return json.dumps({"orders": orders, "page": 1, "total_count": 1000 + seed * 37}, indent=2)


def json_catalog(seed: int = 2, count: int = 14) -> str:
    """A catalog tool result, compact JSON: prices, stock, ratings, dimensions."""
    rng = random.Random(seed)
    products = [
        {
            "id": rng.randint(1000000, 9999999),
            "sku": f"{rng.choice('ABCDEFGH')}{rng.randint(100, 999)}-{rng.randint(10, 99)}",
            "title": f"{rng.choice(_WORDS).title()} {rng.choice(_WORDS)} {rng.choice(_NOUNS)}",
            "price": round(rng.uniform(5, 900), 2),
            "list_price": round(rng.uniform(900, 1200), 2),
            "stock": rng.randint(0, 2500),
            "rating": round(rng.uniform(2.5, 5), 1),
            "reviews": rng.randint(0, 18000),
            "dimensions_cm": [round(rng.uniform(1, 80), 1) for _ in range(3)],
            "weight_kg": round(rng.uniform(0.05, 25), 3),
            "warehouse": {
                "id": f"WH{rng.randint(1, 40):03d}",
                "lat": round(rng.uniform(40, 55), 6),
                "lon": round(rng.uniform(-5, 20), 6),
            },
            "tags": rng.sample(_WORDS, 3),
            "active": rng.random() > 0.1,
        }
        for _ in range(count)
    ]
    return json.dumps({"query": "catalog.list", "took_ms": rng.randint(5, 90), "results": products})


def json_search(seed: int = 3, count: int = 8) -> str:
    """A web-search tool result: titles, urls, text snippets, scores, dates."""
    rng = random.Random(seed)
    snippets = [
        "Compare prices from 40 retailers and read verified reviews before you buy.",
        "Our guide explains how to pick the right size, with measurements for every model.",
        "Free delivery on orders over 50 EUR. Returns accepted within 30 days of purchase.",
        "Tested for 6 weeks in real conditions: battery life, comfort and build quality.",
        "The 2024 edition adds USB-C charging and a lighter frame; the price stays the same.",
        "Users report that the hinge loosens after a few months of daily use.",
        "Step-by-step instructions for cleaning, descaling and replacing the filter.",
        "Specifications, manuals and firmware downloads for all current products.",
    ]
    results = []
    for rank in range(1, count + 1):
        noun = rng.choice(_NOUNS)
        site = rng.choice(
            ["example-shop.com", "reviews.example.org", "gadgetlab.example.net", "forum.example.io"]
        )
        results.append(
            {
                "rank": rank,
                "title": f"Best {rng.choice(_WORDS)} {noun} {rng.randint(2022, 2024)}: "
                f"{rng.randint(5, 25)} tested",
                "url": f"https://{site}/{noun}/{rng.randint(10000, 99999)}-{rng.choice(_WORDS)}-{noun}",
                "snippet": rng.choice(snippets),
                "score": round(rng.random(), 4),
                "published": _iso(rng)[:10],
                "cached_id": f"{rng.getrandbits(64):016x}",
            }
        )
    return json.dumps({"search_id": _ident(rng, "srch_", 12), "results": results}, indent=2)


def json_metrics(seed: int = 4, points: int = 40) -> str:
    """A monitoring tool result: a time series of floats, the most number-heavy shape."""
    rng = random.Random(seed)
    start = 1717400000 + seed * 3600
    series = [
        {
            "ts": start + i * 60,
            "cpu": round(rng.uniform(5, 95), 2),
            "mem_mb": rng.randint(400, 3900),
            "rps": round(rng.uniform(50, 1800), 1),
            "p50_ms": round(rng.uniform(3, 40), 2),
            "p99_ms": round(rng.uniform(40, 900), 2),
            "errors": rng.randint(0, 12),
        }
        for i in range(points)
    ]
    return json.dumps({"host": f"web-{seed:02d}.eu-central-1", "interval_s": 60, "series": series}, indent=1)


def logs(seed: int = 5, lines: int = 45) -> str:
    """Application logs with request lines, warnings and one Python traceback."""
    rng = random.Random(seed)
    paths = ["/api/v1/orders", "/api/v1/cart", "/api/v1/products", "/healthz", "/api/v1/users/me", "/login"]
    out = []
    for i in range(lines):
        ts = f"2024-06-03 14:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d},{rng.randint(0, 999):03d}"
        req = f"{rng.getrandbits(32):08x}"
        roll = rng.random()
        if roll < 0.75:
            path = rng.choice(paths)
            if rng.random() < 0.4:
                path += f"/{rng.randint(1, 99999)}"
            code = rng.choice([200, 200, 200, 201, 204, 304, 400, 404])
            out.append(
                f"{ts} INFO  [worker-{rng.randint(1, 8)}] http: {rng.choice(['GET', 'POST', 'PUT'])} {path} "
                f"status={code} duration_ms={rng.uniform(1, 400):.1f} req_id={req} "
                f"bytes={rng.randint(80, 90000)}"
            )
        elif roll < 0.9:
            out.append(
                f"{ts} WARN  [worker-{rng.randint(1, 8)}] db: slow query took {rng.randint(500, 4000)}ms "
                f"table=order_items rows={rng.randint(1000, 200000)} req_id={req}"
            )
        else:
            out.append(
                f"{ts} ERROR [worker-{rng.randint(1, 8)}] payments: charge failed for order ord_{req} "
                f"amount={rng.uniform(5, 500):.2f} provider_code=card_declined retry_in={rng.randint(1, 30)}s"
            )
        if i == lines // 2:
            out += [
                "Traceback (most recent call last):",
                '  File "/srv/app/shop/payments/service.py", line 214, in capture',
                "    response = self._client.post(url, json=payload, timeout=self._timeout)",
                '  File "/srv/app/.venv/lib/python3.11/site-packages/httpx/_client.py", line 1145, in post',
                "    return self.request(",
                '  File "/srv/app/.venv/lib/python3.11/site-packages/httpx/_transports/default.py", line 232,'
                " in handle_request",
                "    with map_httpcore_exceptions():",
                "httpx.ReadTimeout: The read operation timed out",
            ]
    return "\n".join(out) + "\n"


def base64_blob(seed: int = 6, size: int = 3000) -> str:
    """An attachment as a tool might return it: base64 wrapped at 76 columns."""
    data = random.Random(seed).randbytes(size)
    encoded = base64.b64encode(data).decode()
    return "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76)) + "\n"


def hex_blob(seed: int = 7, lines: int = 40) -> str:
    """A hexdump and a list of sha256 digests and uuids."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        chunk = rng.randbytes(16)
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        out.append(f"{i * 16:08x}  {hexes}  |{text}|")
    for _ in range(15):
        out.append(f"sha256:{rng.randbytes(32).hex()}  {rng.choice(_NOUNS)}-{rng.randint(1, 9)}.tar.gz")
    for _ in range(15):
        h = rng.randbytes(16).hex()
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return "\n".join(out) + "\n"


_GENERATED: dict[str, list[Callable[[], str]]] = {
    "json tool output": [
        json_orders,
        json_catalog,
        json_search,
        json_metrics,
        lambda: json_orders(seed=11, count=5),
        lambda: json_catalog(seed=12, count=10),
    ],
    "logs": [logs, lambda: logs(seed=15, lines=40)],
    "base64/hex": [base64_blob, hex_blob],
}

CORPUS: dict[str, list[str]] = {
    "English prose": [EN_LIGHTHOUSES, EN_CACHING, EN_SUPPORT],
    "Chinese prose": [ZH_BOOKSHOP, ZH_DATABASE, ZH_TEA],
    "source code": [PY_MODULE, PY_SCRIPT, JS_SERVER, TS_COMPONENT, GO_WORKER],
    "json tool output": [make() for make in _GENERATED["json tool output"]],
    "logs": [make() for make in _GENERATED["logs"]],
    "mixed en/zh chat": [MIXED_CHAT],
    "Japanese": [JA_TRAIN, JA_BUSINESS],
    "Korean": [KO_MARKET, KO_TECH],
    "Russian": [RU_RIVER, RU_TECH],
    "European (fr/de/es/it/pt/pl)": [EU_MIXED, EU_TRAVEL],
    "emoji chat": [EMOJI_CHAT],
    "base64/hex": [make() for make in _GENERATED["base64/hex"]],
    "whitespace-heavy": [WHITESPACE_TABLE],
}

MAIN_CATEGORIES = ("English prose", "Chinese prose", "source code", "json tool output")
